package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestScanObject(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{` {"a":1} `, true},
		{`{"a":"x","b":[1,{"c":null}],"d":-0.5e+3,"e":true,"f":false}`, true},
		{`{"a\"b":"\u00e9\n"}`, true},
		{``, false},
		{`[]`, false},
		{`null`, false},
		{`"x"`, false},
		{`{`, false},
		{`{"a"}`, false},
		{`{"a":}`, false},
		{`{"a":1,}`, false},
		{`{"a":01}`, false},
		{`{"a":1.}`, false},
		{`{"a":tru}`, false},
		{`{"a":"x` + "\x01" + `"}`, false},
		{`{"a":"\x"}`, false},
		{`{"a":"\u12"}`, false},
		{`{} {}`, false},
		{`{}x`, false},
	}
	for _, tt := range tests {
		err := scanObject([]byte(tt.in), func(_, _ []byte, _ bool) {})
		if got := err == nil; got != tt.want {
			t.Errorf("scanObject(%q) = %v; want valid %v", tt.in, err, tt.want)
		}
	}
}

// FuzzScanObject checks the scanner against encoding/json: the same inputs
// are valid objects, and each member's last raw value is the one
// encoding/json sees under the same (unescaped) name.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"auth_code":"abc","state":null}`, `{"a":[1,2,{"b":"c"}],"a":"d"}`,
		`{"\u0061uth_code":"x"}`, `{"a":1e5,"b":-0,"c":"\ud800"}`, `[1]`, `{"a":"` + "\xff" + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		last := map[string][]byte{}
		err := scanObject(b, func(name, value []byte, plain bool) {
			if want := isPlainString(value); plain != want {
				t.Fatalf("scanObject(%q): value %q plain = %v; want %v", b, value, plain, want)
			}
			n := string(name)
			if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
				n = jsonName(name) // as encoding/json: unescaped, bad UTF-8 replaced
			}
			last[n] = value
		})
		trimmed := bytes.TrimLeft(b, " \t\r\n")
		wantValid := json.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
		if (err == nil) != wantValid {
			t.Fatalf("scanObject(%q) = %v; encoding/json says valid object %v", b, err, wantValid)
		}
		if !wantValid {
			return
		}
		var ref map[string]json.RawMessage
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("encoding/json cannot decode %q: %v", b, err)
		}
		if len(ref) != len(last) {
			t.Fatalf("scanObject(%q) saw names %q; encoding/json %q", b, keys(last), keys(ref))
		}
		for name, v := range ref {
			if !bytes.Equal(last[name], v) {
				t.Fatalf("scanObject(%q)[%q] = %q; encoding/json %q", b, name, last[name], v)
			}
		}
	})
}

// isPlainString is what scanObject's plain means, the slow way: a string
// of printable ASCII without escapes.
func isPlainString(v []byte) bool {
	if len(v) < 2 || v[0] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestHasLoneSurrogate(t *testing.T) {
	tests := []struct {
		raw  string // a JSON string, quoted
		want bool
	}{
		{`"player-42"`, false},
		{`"\ud83d\ude00"`, false}, // a pair: 😀
		{`"x\ud83d\ude00y\u00e9"`, false},
		{`"\ufffd"`, false},
		{`"\ud7ff\ue000"`, false}, // either side of the surrogates
		{`"player-\ud83d"`, true}, // high, then the end
		{`"player-\ude00"`, true}, // low alone
		{`"\ude00\ud83d"`, true},  // the wrong order
		{`"\ud83dx\ude00"`, true}, // apart
		{`"\ud83d\ud83d\ude00"`, true},
		{`"\uD83D"`, true},   // upper-case hex
		{`"\\ud83d"`, false}, // an escaped backslash, then text
		{`"\\\ud83d"`, true},
		{`"\"\ud83d\ude00\n"`, false},
	}
	for _, tt := range tests {
		if got := hasLoneSurrogate([]byte(tt.raw)); got != tt.want {
			t.Errorf("hasLoneSurrogate(%s) = %v; want %v", tt.raw, got, tt.want)
		}
	}
}
