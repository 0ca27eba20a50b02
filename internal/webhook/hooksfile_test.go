package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// savedHooksFile is testdata/webhooks-saved-state.json, a small webhook
// state as an earlier build kept it (an endpoint, an event, a delivery
// and an idempotency key), in the form of the builds that checksummed
// it.
func savedHooksFile(t *testing.T) []byte {
	t.Helper()
	state, err := os.ReadFile("../../testdata/webhooks-saved-state.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := decodeHooksFile(state)
	if err != nil {
		t.Fatalf("decodeHooksFile(%q) = %v; want no error", state, err)
	}
	b, err := encodeHooksFile(&f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encodeHooksFile returns f as an earlier build wrote it to HooksFileName.
// Events' bodies are kept byte for byte as delivered (API.md §5.1, "body
// exactly"): json.Marshal would escape <, > and & inside them, and a
// restart would then send and show other bytes.
func encodeHooksFile(f *hooksFile) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"format":2,"sha256":"`)
	sumAt := buf.Len()
	buf.Write(make([]byte, 2*sha256.Size)) // the checksum, once the state is there
	buf.WriteString(`","state":`)
	stateAt := buf.Len()
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	b := buf.Bytes()
	sum := sha256.Sum256(b[stateAt:])
	hex.Encode(b[sumAt:], sum[:])
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

func TestHooksFileRoundTrip(t *testing.T) {
	b := savedHooksFile(t)
	f, err := decodeHooksFile(b)
	if err != nil {
		t.Fatalf("decodeHooksFile(%.60q) = %v; want no error", b, err)
	}
	if len(f.Endpoints) != 1 || len(f.Events) != 1 || len(f.Deliveries) != 1 || len(f.Idempotency) != 1 {
		t.Errorf("decodeHooksFile(%.60q) = %d endpoints, %d events, %d deliveries, %d keys; want 1 of each",
			b, len(f.Endpoints), len(f.Events), len(f.Deliveries), len(f.Idempotency))
	}
	if again, err := encodeHooksFile(&f); err != nil || !bytes.Equal(again, b) {
		t.Errorf("encodeHooksFile(decodeHooksFile(%q)) = %q, %v; want it unchanged", b, again, err)
	}
}

// TestHooksFileDamage flips each bit of a saved file in turn: every flip
// is refused, or (a hex digit's case in the checksum) reads as the same
// state. Before the checksum, a flip in a member's name loaded as an
// empty member, and one in a secret or a URL as another endpoint.
func TestHooksFileDamage(t *testing.T) {
	b := savedHooksFile(t)
	for bit := range 8 * len(b) {
		d := bytes.Clone(b)
		d[bit/8] ^= 1 << (bit % 8)
		f, err := decodeHooksFile(d)
		if err != nil {
			continue
		}
		if enc, err := encodeHooksFile(&f); err != nil || !bytes.Equal(enc, b) {
			t.Fatalf("decodeHooksFile with bit %d flipped (byte %d: %q) = another state, no error", bit, bit/8, b[bit/8])
		}
	}
}

func TestHooksFileForms(t *testing.T) {
	b := savedHooksFile(t)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	state := string(top["state"])
	sum := top["sha256"]
	for _, tt := range []struct {
		name, file string
		err        string // "" for none
		endpoints  int
	}{
		{"current", string(b), "", 1},
		{"earlier build: the state alone", state, "", 1},
		{"earlier build, a member misspelt", strings.Replace(state, `"endpoints"`, `"endpoinTs"`, 1), `unknown member "endpoinTs"`, 0},
		{"earlier build, empty", `{}`, "no endpoints", 0},
		{"null", `null`, "no endpoints", 0},
		{"not an object", `[]`, "cannot unmarshal", 0},
		{"cut short", string(b[:len(b)/2]), "unexpected end", 0},
		{"a newer format", strings.Replace(string(b), `"format":2`, `"format":3`, 1), "format 3", 0},
		{"format misspelt", strings.Replace(string(b), `"format"`, `"formaT"`, 1), `unknown member "formaT"`, 0},
		{"no checksum", `{"format":2,"state":` + state + `}`, "unexpected end", 0},
		{"checksum not hex", `{"format":2,"sha256":"zz","state":` + state + `}`, "checksum does not match", 0},
		{"no state", `{"format":2,"sha256":` + string(sum) + `}`, "checksum does not match", 0},
		{"an extra member", `{"format":2,"sha256":` + string(sum) + `,"state":` + state + `,"x":1}`, `unknown member "x"`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeHooksFile([]byte(tt.file))
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("decodeHooksFile(%.60q) = %v; want an error saying %q", tt.file, err, tt.err)
			case tt.err == "" && (err != nil || len(f.Endpoints) != tt.endpoints):
				t.Errorf("decodeHooksFile(%.60q) = %d endpoints, %v; want %d, no error", tt.file, len(f.Endpoints), err, tt.endpoints)
			}
		})
	}
	if _, err := decodeHooksFile([]byte(`{"format":2,"sha256":"zz","state":` + state + `}`)); !errors.Is(err, errHooksChecksum) {
		t.Errorf("decodeHooksFile(a bad checksum) = %v; want %v", err, errHooksChecksum)
	}
}

// FuzzHooksFile feeds arbitrary bytes to decodeHooksFile: it never
// panics, and what it reads encodes to a file that reads back the same.
func FuzzHooksFile(f *testing.F) {
	f.Add([]byte(`{"endpoints":null,"events":null,"deliveries":null,"idempotency":null}`))
	f.Add([]byte(`{"format":2,"sha256":"","state":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		hf, err := decodeHooksFile(b)
		if err != nil {
			return
		}
		enc, err := encodeHooksFile(&hf)
		if err != nil {
			t.Fatalf("encodeHooksFile of a decoded state: %v", err)
		}
		again, err := decodeHooksFile(enc)
		if err != nil {
			t.Fatalf("decodeHooksFile(%q) = %v; want no error", enc, err)
		}
		enc2, err := encodeHooksFile(&again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encode(decode(%q)) = %q, %v; want it unchanged", enc, enc2, err)
		}
	})
}
