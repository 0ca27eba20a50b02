package main

import (
	"bytes"
	"deeplink/internal/webhook"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fuzzBody is a request body as decodeObject takes one: a raw field and
// two string fields.
type fuzzBody struct {
	A    json.RawMessage `json:"a"`
	S    jsonString      `json:"s"`
	Code jsonString      `json:"auth_code"`
}

func TestDecodeObject(t *testing.T) {
	ok := func(a, s string) *fuzzBody {
		b := &fuzzBody{S: jsonString{s: s, set: s != ""}}
		if a != "" {
			b.A = json.RawMessage(a)
		}
		return b
	}
	tests := []struct {
		in   string
		want *fuzzBody // nil: refused with invalid_json
	}{
		{`{}`, ok("", "")},
		{" \t\r\n{} \n", ok("", "")},
		{`{"a":[1,{"b":null}],"s":"x"}`, ok(`[1,{"b":null}]`, "x")},
		{`{"a" : 1e999 , "s" : "\u00e9\ud83d\ude00"}`, ok(`1e999`, "é😀")},
		{`{"\u0061":true}`, ok(`true`, "")},
		{`{"s":null}`, ok("", "")},
		{`{"A":1,"S":"x","Auth_Code":"y"}`, ok("", "")}, // names match exactly
		{`{"x":{"a":1},"y":{"a":1},"z":[{"a":1},{"a":1}]}`, ok("", "")},
		{"{\"a\":\"\xff\"}", ok("\"\xff\"", "")}, // a known member's own to judge
		{`{"s":"\ud800"}`, &fuzzBody{S: jsonString{set: true, bad: "must be valid UTF-8 (an escaped surrogate must be half of a pair)"}}},
		{"{\"s\":\"\xff\"}", &fuzzBody{S: jsonString{set: true, bad: "must be valid UTF-8"}}},
		{`{"s":1}`, &fuzzBody{S: jsonString{set: true, bad: "must be a string"}}},

		{``, nil},
		{` `, nil},
		{`[]`, nil},
		{`null`, nil},
		{`"x"`, nil},
		{`{`, nil},
		{`{"a"}`, nil},
		{`{"a":}`, nil},
		{`{"a":1,}`, nil},
		{`{"a":1 "s":"x"}`, nil},
		{`{"a":[1 2]}`, nil},
		{`{"a":[1,,2]}`, nil},
		{`{"a":01}`, nil},
		{`{"a":{"b"}}`, nil},
		{`{"a":[}`, nil},
		{"{\"a\":\"x\x01\"}", nil},
		{`{"a":"\x"}`, nil},
		{`{} {}`, nil},
		{`{}x`, nil},
		{`{"a":{"\ud800":1}}`, nil},     // a bad name inside a known member: a name, not the field's value
		{"{\"a\":[{\"\xff\":1}]}", nil}, // at any depth
		{`{}]`, nil},
		{"\ufeff{}", nil},
		{`{"s":"x","s":"x"}`, nil},
		{`{"s":"x","\u0073":"y"}`, nil},
		{`{"x":1,"x":1}`, nil},
		{`{"x":{"y":[{"z":1,"z":1}]}}`, nil},
		{`{"a":{"b":1,"b":2}}`, nil}, // nested in a known member too
		{`{"a":{"\ud800":1,"\ud800":2}}`, nil},
		{"{\"\xff\":1}", nil},
		{`{"\udc00":1}`, nil},
		{"{\"x\":\"\xff\"}", nil},
		{"{\"x\":{\"\xff\":1}}", nil},
		{`{"x":["\ud83d"]}`, nil},
		{strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth), ok(strings.Repeat(`{"a":`, maxJSONDepth-1)+"1"+strings.Repeat("}", maxJSONDepth-1), "")},
		{strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1), nil},
	}
	for _, tt := range tests {
		var got fuzzBody
		err := decodeObject([]byte(tt.in), &got)
		in := tt.in
		if len(in) > 80 {
			in = in[:80] + "…"
		}
		if tt.want == nil {
			var e *apiError
			if !errors.As(err, &e) || e.Status != 400 || e.Code != "invalid_json" || e.Message == "" {
				t.Errorf("decodeObject(%q) = %v; want a 400 invalid_json", in, err)
			}
			if got.A != nil || got.S != (jsonString{}) {
				t.Errorf("decodeObject(%q) refused it, but filled %+v; want nothing", in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("decodeObject(%q) = %v; want nil", in, err)
			continue
		}
		if !bytes.Equal(got.A, tt.want.A) || !sameString(got.S, tt.want.S) || !sameString(got.Code, tt.want.Code) {
			t.Errorf("decodeObject(%q) = %+v; want %+v", in, got, *tt.want)
		}
	}
}

// TestDecodeObjectMessages checks that the error says which rule the body
// breaks, naming the member.
func TestDecodeObjectMessages(t *testing.T) {
	tests := []struct{ in, want string }{
		{`[]`, "the body is not one JSON object"},
		{`{"s":"x","s":"y"}`, `the body has the member "s" twice`},
		{`{"data":{"object":{"id":1,"id":2}}}`, `an object in "data" has the member "id" twice`},
		{"{\"\xff\":1}", "a member name is not valid UTF-8"},
		{"{\"x\":\"\xff\"}", `the member "x", which this request does not use, is not valid UTF-8`},
		{`{"` + strings.Repeat("é", 40) + `":1,"` + strings.Repeat("é", 40) + `":1}`, `the body has the member "` + strings.Repeat("é", 32) + `…" twice`},
	}
	for _, tt := range tests {
		var v fuzzBody
		err := decodeObject([]byte(tt.in), &v)
		var e *apiError
		if !errors.As(err, &e) || e.Message != tt.want {
			t.Errorf("decodeObject(%q) = %v; want message %q", tt.in, err, tt.want)
		}
	}
}

// TestDecodeObjectFieldTypes: a struct field of a type whose decoding can
// fail, or that would take invalid UTF-8 silently, is a programming error.
func TestDecodeObjectFieldTypes(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("decodeObject into a string field did not panic")
		}
	}()
	var v struct {
		S string `json:"s"`
	}
	decodeObject([]byte(`{"s":"x"}`), &v)
}

// refObject is decodeObject's rules the plain way, to check it against:
// whether b is one JSON object, encoding/json's view of it (names exact,
// as a map keeps them), and whether no name is twice in any of its
// objects, names compared as encoding/json unescapes them (so that two
// different names that are not valid Unicode may look the same here).
func refObject(b []byte) (members map[string]json.RawMessage, object, distinct bool) {
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if !json.Valid(b) || len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, false, false
	}
	if err := json.Unmarshal(b, &members); err != nil {
		panic("json.Valid and Unmarshal disagree on " + string(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var value func() bool // reads a value; false if a name repeats in it
	value = func() bool {
		t, err := dec.Token()
		if err != nil {
			panic("json.Valid and Token disagree on " + string(b))
		}
		switch t {
		case json.Delim('{'):
			names := map[string]bool{}
			distinct := true
			for dec.More() {
				n, _ := dec.Token()
				if names[n.(string)] {
					distinct = false
				}
				names[n.(string)] = true
				distinct = value() && distinct
			}
			dec.Token()
			return distinct
		case json.Delim('['):
			distinct := true
			for dec.More() {
				distinct = value() && distinct
			}
			dec.Token()
			return distinct
		}
		return true
	}
	return members, true, value()
}

// wantString is the jsonString of a member whose raw value is raw (nil
// when absent), by way of encoding/json.
func wantString(raw json.RawMessage) jsonString {
	var s string
	switch {
	case raw == nil || string(raw) == "null":
		return jsonString{}
	case json.Unmarshal(raw, &s) != nil:
		return jsonString{set: true, bad: "must be a string"}
	case !utf8.Valid(raw):
		return jsonString{set: true, bad: "must be valid UTF-8"}
	case hasLoneSurrogate(raw): // TestHasLoneSurrogate checks it
		return jsonString{set: true, bad: "must be valid UTF-8 (an escaped surrogate must be half of a pair)"}
	}
	return jsonString{set: true, s: s}
}

// sameString compares jsonStrings but for plain, which only spares
// validation a look.
func sameString(a, b jsonString) bool { return a.s == b.s && a.set == b.set && a.bad == b.bad }

// FuzzDecodeObject checks decodeObject against encoding/json and
// refObject. Seeds are in testdata/fuzz/FuzzDecodeObject.
func FuzzDecodeObject(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var got fuzzBody
		err := decodeObject(b, &got) // never panics
		ref, object, distinct := refObject(b)
		if err != nil {
			if object && distinct && validUnicode(b) {
				t.Fatalf("decodeObject(%q) = %v; want nil: one object, names distinct, valid UTF-8 throughout", b, err)
			}
			return
		}
		if !object || !distinct && validUnicode(b) {
			t.Fatalf("decodeObject(%q) = nil; want an error: not one object, or a name repeats", b)
		}
		// The fields are what encoding/json reads under the exact names.
		if !bytes.Equal(got.A, ref["a"]) {
			t.Fatalf("decodeObject(%q): a = %q; encoding/json %q", b, got.A, ref["a"])
		}
		for _, f := range []struct {
			name string
			got  jsonString
		}{{"s", got.S}, {"auth_code", got.Code}} {
			want := wantString(ref[f.name])
			if !sameString(f.got, want) {
				t.Fatalf("decodeObject(%q): %s = %+v; want %+v", b, f.name, f.got, want)
			}
			if f.got.plain && strings.ContainsFunc(f.got.s, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
				t.Fatalf("decodeObject(%q): %s = %+v, plain but for %q", b, f.name, f.got, f.got.s)
			}
		}
		// Round trip: encoding/json writes the members out again, and
		// they read back the same.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(ref); err != nil {
			t.Fatalf("encoding %q again: %v", b, err)
		}
		var again fuzzBody
		if err := decodeObject(buf.Bytes(), &again); err != nil {
			t.Fatalf("decodeObject(%q), %q written again by encoding/json, = %v", buf.Bytes(), b, err)
		}
		var compact bytes.Buffer
		if got.A != nil {
			json.Compact(&compact, got.A)
		}
		if !bytes.Equal(again.A, compact.Bytes()) || !sameString(again.S, got.S) || !sameString(again.Code, got.Code) {
			t.Fatalf("decodeObject(%q) = %+v; the same written again, %q, = %+v", b, got, buf.Bytes(), again)
		}
		// Any member given a second time is refused.
		for name := range ref {
			q, _ := json.Marshal(name)
			at := bytes.IndexByte(b, '{') + 1
			twice := append(append(append([]byte(nil), b[:at]...), q...), ':', 'n', 'u', 'l', 'l', ',')
			twice = append(twice, b[at:]...)
			if decodeObject(twice, &again) == nil {
				t.Fatalf("decodeObject(%q) = nil, with %s twice; want an error", twice, q)
			}
			break
		}
	})
}

func TestHasLoneSurrogate(t *testing.T) {
	tests := []struct {
		raw  string // JSON text
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
		{`{"a":["\ud83d\ude00"],"b":1}`, false}, // any value, not only a string
		{`{"\udc00":1}`, true},
		{`[1,"\ud800"]`, true},
	}
	for _, tt := range tests {
		if got := hasLoneSurrogate([]byte(tt.raw)); got != tt.want {
			t.Errorf("hasLoneSurrogate(%s) = %v; want %v", tt.raw, got, tt.want)
		}
	}
}

// jsonEndpoint is an endpoint that reads a JSON body, for TestJSONBodyRules.
type jsonEndpoint struct {
	name, method, path string
	key                string                  // X-API-Key, if any
	known              string                  // a member the request uses: a required one where it has one
	value              func(*testing.T) string // a fresh, valid value for known, as JSON
	rest               string                  // the other members of a valid body
	ok                 int                     // the status of a valid body
	renamed            jsonAnswer              // the answer when known is named in another case
	badValue           jsonAnswer              // the answer when known's value is not valid UTF-8
}

// jsonAnswer is what a test expects: a status, the error code and a 422's
// one field. The token endpoint answers every refusal here with its own
// 400 invalid_request.
type jsonAnswer struct {
	status int
	code   string
	field  string
}

// TestJSONBodyRules sends each rule for bad JSON to every endpoint that
// reads a JSON body (register, token, webhook create and patch, publish,
// recover), through the real mux: a member name twice (at any
// depth), a name matched in another case, invalid UTF-8 (or an escaped
// lone surrogate) in a name or in a member the request does not use, not
// an object, trailing data, all 400 invalid_json (the token endpoint's
// invalid_request); invalid UTF-8 in a member the request uses is that
// field's 422.
func TestJSONBodyRules(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	hooks := "/stores/" + storeA + "/webhooks"
	created := postJSON(t, ts.URL+hooks, keyA, map[string]any{"url": "https://hooks.example.com/", "events": []string{webhook.EventOrderStatus}})
	require.Equal(t, http.StatusCreated, created.status, "creating an endpoint: %s", created.body)
	var ep struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(created.body, &ep))

	quoted := func(s string) string { q, _ := json.Marshal(s); return string(q) }
	n := 0
	hookURL := func(*testing.T) string { n++; return quoted(fmt.Sprintf("https://hooks.example.com/%d", n)) }
	invalid := jsonAnswer{http.StatusBadRequest, "invalid_json", ""}
	endpoints := []jsonEndpoint{
		{
			name: "register", method: http.MethodPost, path: "/stores/" + storeA + "/auth/auth-code", key: keyA,
			known: "auth_code", value: func(t *testing.T) string { return quoted(newAuthCode(t)) },
			rest: `"redirect_uri":"` + shopCB + `","client_reference_id":"p","code_challenge":"` + rfc7636Challenge + `","state":"s"`,
			ok:   http.StatusOK, renamed: jsonAnswer{422, "validation_failed", "auth_code"}, badValue: jsonAnswer{422, "validation_failed", "auth_code"},
		},
		{
			name: "token", method: http.MethodPost, path: "/stores/" + storeA + "/auth/token",
			known: "code", value: func(t *testing.T) string {
				code := newAuthCode(t)
				requireOK(t, postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge)))
				return quoted(code)
			},
			rest: `"grant_type":"authorization_code","redirect_uri":"` + shopCB + `","code_verifier":"` + rfc7636Verifier + `"`,
			ok:   http.StatusOK, renamed: jsonAnswer{status: 400}, badValue: jsonAnswer{status: 400},
		},
		{
			name: "webhook create", method: http.MethodPost, path: hooks, key: keyA,
			known: "url", value: hookURL, rest: `"events":["` + webhook.EventOrderStatus + `"]`,
			ok: http.StatusCreated, renamed: jsonAnswer{422, "validation_failed", "url"}, badValue: jsonAnswer{422, "validation_failed", "url"},
		},
		{
			name: "webhook patch", method: http.MethodPatch, path: hooks + "/" + ep.Data.ID, key: keyA,
			known: "url", value: hookURL, rest: `"description":"d"`,
			ok: http.StatusOK, renamed: jsonAnswer{200, "", ""}, badValue: jsonAnswer{422, "validation_failed", "url"},
		},
		{
			name: "publish", method: http.MethodPost, path: "/stores/" + storeA + "/events", key: keyA,
			known: "type", value: func(*testing.T) string { return quoted(webhook.EventOrderStatus) },
			rest: `"data":{"object":{"id":"o1","status":"pending"}}`,
			ok:   http.StatusAccepted, renamed: jsonAnswer{422, "validation_failed", "type"}, badValue: jsonAnswer{422, "validation_failed", "type"},
		},
		{
			name: "recover", method: http.MethodPost, path: hooks + "/" + ep.Data.ID + "/recover", key: keyA,
			known: "since", value: func(*testing.T) string { return quoted("2025-01-31T09:00:00Z") },
			rest: `"note":"n"`,
			ok:   http.StatusAccepted, renamed: jsonAnswer{422, "validation_failed", "since"}, badValue: jsonAnswer{422, "validation_failed", "since"},
		},
	}
	// A rule makes a body from the known member, its value and the rest.
	rules := []struct {
		name string
		body func(e jsonEndpoint, k, v string) string
		want func(e jsonEndpoint) jsonAnswer // nil: e.ok
	}{
		{"valid", func(e jsonEndpoint, k, v string) string { return `{"` + k + `":` + v + `,` + e.rest + `}` }, nil},
		{"members of any kind the request does not use", func(e jsonEndpoint, k, v string) string {
			return ` {"x":null,"y":{"a":[1,{"b":"\u00e9\ud83d\ude00"}],"c":{"a":1}},"z":1e999,"` + k + `":` + v + `,` + e.rest + `} `
		}, nil},
		{"the known name escaped", func(e jsonEndpoint, k, v string) string {
			return `{"\u00` + fmt.Sprintf("%x", k[0]) + k[1:] + `":` + v + `,` + e.rest + `}`
		}, nil},
		{"the known member twice", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"` + k + `":` + v + `}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"the known member twice, once escaped", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"\u00` + fmt.Sprintf("%x", k[0]) + k[1:] + `":` + v + `}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"an unused member twice", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"x":1,"x":1}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"a name twice in a nested object", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"x":[{"a":1,"a":2}]}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"the known name in capitals", func(e jsonEndpoint, k, v string) string {
			return `{"` + strings.ToUpper(k) + `":` + v + `,` + e.rest + `}`
		}, func(e jsonEndpoint) jsonAnswer { return e.renamed }},
		{"the known name capitalised", func(e jsonEndpoint, k, v string) string {
			return `{"` + strings.ToUpper(k[:1]) + k[1:] + `":` + v + `,` + e.rest + `}`
		}, func(e jsonEndpoint) jsonAnswer { return e.renamed }},
		{"invalid UTF-8 in an unused member", func(e jsonEndpoint, k, v string) string {
			return "{\"" + k + "\":" + v + "," + e.rest + ",\"x\":\"caf\xe9\"}"
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"invalid UTF-8 deep in an unused member", func(e jsonEndpoint, k, v string) string {
			return "{\"" + k + "\":" + v + "," + e.rest + ",\"x\":[{\"\xff\":1}]}"
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"a lone surrogate in an unused member", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"x":"\ud83d"}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"invalid UTF-8 in a member name", func(e jsonEndpoint, k, v string) string {
			return "{\"" + k + "\":" + v + "," + e.rest + ",\"\xc3\":1}"
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"a lone surrogate in a member name", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `,"\udc00":1}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"invalid UTF-8 in the known member", func(e jsonEndpoint, k, v string) string {
			return "{\"" + k + "\":" + v[:len(v)-1] + "\xff\"," + e.rest + "}"
		}, func(e jsonEndpoint) jsonAnswer { return e.badValue }},
		{"a lone surrogate in the known member", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v[:len(v)-1] + `\ud83d",` + e.rest + `}`
		}, func(e jsonEndpoint) jsonAnswer { return e.badValue }},
		{"not an object", func(e jsonEndpoint, k, v string) string {
			return `[{"` + k + `":` + v + `,` + e.rest + `}]`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"trailing garbage", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `} x`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
		{"two objects", func(e jsonEndpoint, k, v string) string {
			return `{"` + k + `":` + v + `,` + e.rest + `}{}`
		}, func(jsonEndpoint) jsonAnswer { return invalid }},
	}
	for _, e := range endpoints {
		for _, r := range rules {
			t.Run(e.name+"/"+r.name, func(t *testing.T) {
				v := e.value(t)
				body := r.body(e, e.known, v)
				want := jsonAnswer{status: e.ok}
				if r.want != nil {
					want = r.want(e)
				}
				headers := []string{"Content-Type", "application/json"}
				if e.key != "" {
					headers = append(headers, "X-API-Key", e.key)
				}
				got := call(t, e.method, ts.URL+e.path, strings.NewReader(body), headers...)
				switch {
				case e.name == "token" && want.status == http.StatusOK:
					requireToken(t, got)
				case e.name == "token": // OAuth's error body: every one of these is invalid_request
					requireTokenError(t, got, "invalid_request")
				case want.status < 300:
					require.Equal(t, want.status, got.status, "%s %s with %q: status; body %s", e.method, e.path, body, got.body)
					// The known member was read under its exact name only.
					var answer struct {
						Data map[string]any `json:"data"`
					}
					require.NoError(t, json.Unmarshal(got.body, &answer))
					var sent any
					require.NoError(t, json.Unmarshal([]byte(v), &sent))
					if got, ok := answer.Data[e.known]; ok {
						if r.want == nil {
							assert.Equal(t, sent, got, "%s in the answer to %q", e.known, body)
						} else {
							assert.NotEqual(t, sent, got, "%s in the answer to %q", e.known, body)
						}
					}
				default:
					fields := requireAPIError(t, got, want.status, want.code)
					if want.field != "" {
						assert.Equal(t, []string{want.field}, fields, "fields of the answer to %q", body)
					}
				}
			})
		}
	}
}
