package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"deeplink/internal/store/embedded"
)

// registerSeeds are bodies for POST .../auth/auth-code: valid ones, every
// kind of invalid one, and the JSON corners the custom jsonString sees.
var registerSeeds = []string{
	// valid, minimal and full
	`{"auth_code":"abcdefghijklmnop","redirect_uri":"https://shop.example.com/cb","client_reference_id":"p","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"s"}`,
	`{"auth_code":"Az09-._~Az09-._~Az09","redirect_uri":"https://shop.example.com:8443/stores/x/auth/callback?a=b","client_reference_id":"player-42","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"xyz","first_name":"Ada","last_name":"Lovelace","language":"pt-BR","currency":"EUR","country":"GB","timezone":"Europe/London"}`,
	// escapes, non-ASCII and nulls in accepted strings
	`{"auth_code":"abcdefghijklmnop\u0071","redirect_uri":"https://shop.example.com/c\u00e9","client_reference_id":"J\u00fcrgen \"the\" \/ \ud83d\ude00","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"s","first_name":null,"last_name":"","unknown":[1,{"x":2}]}`,
	` 	{"state":"s","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","client_reference_id":"p","redirect_uri":"https://SHOP.example.com/cb","auth_code":"0123456789abcdef"} `,
	// a member twice: refused
	`{"auth_code":"first-code-0123456","auth_code":"second-code-012345","redirect_uri":"https://shop.example.com/cb","client_reference_id":"p","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"s"}`,
	// 422: every field wrong at once, wrong types, control characters
	`{"auth_code":"short","redirect_uri":"http://shop.example.com/cb#frag","client_reference_id":"","code_challenge":"abc","state":"","first_name":1,"language":"english!","currency":"eur","country":"GBR","timezone":"Mars/Olympus"}`,
	`{"auth_code":123,"redirect_uri":true,"client_reference_id":["a"],"code_challenge":{},"state":null}`,
	`{"auth_code":"abcdefghijklmnop","redirect_uri":"https://shop.example.com/cb","client_reference_id":"a\u0000b","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"\u0085"}`,
	`{"auth_code":"abcdefghijklmnop","redirect_uri":"https://user@shop.example.com/cb","client_reference_id":"p","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"s","timezone":"Local"}`,
	"{\"auth_code\":\"abcdefghijklmnop\",\"redirect_uri\":\"https://shop.example.com/cb\",\"client_reference_id\":\"\xff\xfe\",\"code_challenge\":\"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM\",\"state\":\"s\"}",
	// 400: redirect host not allowed, and not JSON objects
	`{"auth_code":"abcdefghijklmnop","redirect_uri":"https://evil.example.com/cb","client_reference_id":"p","code_challenge":"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM","state":"s"}`,
	`{}`, `[]`, `null`, `"x"`, ``, `{`, `{"a":1}{}`, `{"auth_code":"abc`,
}

// FuzzRegisterBody sends arbitrary bodies to the register endpoint through
// the real handler and checks the answer against API.md §3 and §4.1.
func FuzzRegisterBody(f *testing.F) {
	for _, s := range registerSeeds {
		f.Add([]byte(s))
	}
	cfg := storeTestConfig(f, "unused")
	// The fuzzer sends thousands of bodies a second with one key: past
	// the key's request budget every answer would be 429, whatever the
	// body, and the bodies it then tried would go untested.
	cfg.Fairness.KeyRate, cfg.Fairness.KeyBurst = 1e9, 1<<30
	st, err := embedded.Open("", embedded.Options{MaxLive: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	srv := newServer(cfg, st, make([]byte, 32), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := srv.handler()

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/stores/"+testStoreID+"/auth/auth-code", bytes.NewReader(body))
		req.Header.Set("X-API-Key", testAPIKey)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		checkRegisterAnswer(t, body, rec.Code, rec.Body.Bytes())
		if rec.Code != http.StatusOK {
			return
		}
		sent, ok := sentRegisterFields(body)
		if !ok {
			t.Fatalf("body %q was accepted, but is not a JSON object of the documented fields", body)
		}
		k := codeKey(testStoreID, sent["auth_code"])
		v, err := st.Get(t.Context(), k.name())
		if err != nil {
			t.Fatalf("body %q: 200 but no code stored under auth_code %q", body, sent["auth_code"])
		}
		got, ok := decodeCode(v)
		if !ok {
			t.Fatalf("body %q: stored record %q does not decode", body, v)
		}
		want := codeRecord{
			RedirectURI:   sent["redirect_uri"],
			CodeChallenge: sent["code_challenge"],
			Player: Player{
				ClientReferenceID: sent["client_reference_id"],
				FirstName:         sent["first_name"],
				LastName:          sent["last_name"],
				Language:          sent["language"],
				Currency:          sent["currency"],
				Country:           sent["country"],
				Timezone:          sent["timezone"],
			},
		}
		if got != want {
			t.Fatalf("body %q: stored %+v; want %+v", body, got, want)
		}
		// Leave the store as it was, so an input gives the same answer
		// however often the fuzzer tries it.
		st.Delete(t.Context(), k.name())
	})
}

// sentRegisterFields returns the string fields of a register body as JSON
// defines them: exact key names, escapes decoded (an accepted body has no
// name twice). ok is false when body is not an object.
func sentRegisterFields(body []byte) (fields map[string]string, ok bool) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return nil, false
	}
	fields = map[string]string{}
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			fields[k] = s
		}
	}
	return fields, true
}

// checkRegisterAnswer checks status and body of a register answer against
// the shapes API.md §3 and §4.1 document.
func checkRegisterAnswer(t *testing.T, req []byte, status int, body []byte) {
	t.Helper()
	wantCodes := map[int][]string{
		http.StatusOK:                    nil,
		http.StatusBadRequest:            {"invalid_json", "redirect_uri_not_allowed"},
		http.StatusConflict:              {"auth_code_conflict"},
		http.StatusRequestEntityTooLarge: {"body_too_large"},
		http.StatusUnprocessableEntity:   {"validation_failed"},
		http.StatusServiceUnavailable:    {"unavailable"},
	}
	codes, known := wantCodes[status]
	if !known {
		t.Fatalf("body %q: status %d; want one of 200, 400, 409, 413, 422, 503", req, status)
	}
	if status == http.StatusOK {
		var ok struct {
			Data struct {
				Status string `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &ok); err != nil || ok.Data.Status != "ok" {
			t.Fatalf("body %q: 200 with %q; want {\"data\":{\"status\":\"ok\"}}", req, body)
		}
		return
	}
	var e struct {
		Error *struct {
			Code    string            `json:"code"`
			Message string            `json:"message"`
			Fields  []json.RawMessage `json:"fields"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil {
		t.Fatalf("body %q: %d with %q, not an error body (%v)", req, status, body, err)
	}
	if !slices.Contains(codes, e.Error.Code) {
		t.Errorf("body %q: %d with code %q; want one of %q", req, status, e.Error.Code, codes)
	}
	if e.Error.Message == "" {
		t.Errorf("body %q: %d with an empty message", req, status)
	}
	if status != http.StatusUnprocessableEntity {
		if e.Error.Fields != nil {
			t.Errorf("body %q: %d with fields %q; want none outside 422", req, status, body)
		}
		return
	}
	if len(e.Error.Fields) == 0 {
		t.Fatalf("body %q: 422 with no fields: %q", req, body)
	}
	known422 := []string{"auth_code", "redirect_uri", "client_reference_id", "code_challenge", "state",
		"first_name", "last_name", "language", "currency", "country", "timezone"}
	for _, raw := range e.Error.Fields {
		var fe struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fe); err != nil || !slices.Contains(known422, fe.Field) || fe.Message == "" {
			t.Errorf("body %q: 422 field entry %s; want {field: a request field, message: non-empty}", req, raw)
		}
	}
}

// FuzzTokenJSON checks readTokenJSON against encoding/json: whatever it
// accepts is one JSON object with no name twice, whose parameters are
// strings (or null, as absent), read as encoding/json reads them under
// their exact names; and it accepts every such body in valid UTF-8.
// Seeds are in testdata/fuzz.
func FuzzTokenJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		var p tokenParams
		terr := readTokenJSON(body, &p)
		m, object, distinct := refObject(body)
		four := p.params()
		params := append(four[:], tokenParam{"client_id", new(string)})
		stringsOnly := true
		for _, f := range params {
			if raw, ok := m[f.name]; ok && string(raw) != "null" && json.Unmarshal(raw, new(string)) != nil {
				stringsOnly = false
			}
		}
		if terr != nil {
			if object && distinct && stringsOnly && validUnicode(body) {
				t.Fatalf("readTokenJSON(%q) = %q; want it accepted", body, terr.Description)
			}
			return
		}
		if !object || !distinct && validUnicode(body) || !stringsOnly {
			t.Fatalf("readTokenJSON(%q) accepted it; want it refused", body)
		}
		for _, f := range params[:4] {
			var want string
			if raw, ok := m[f.name]; ok {
				if !validUnicode(raw) {
					t.Fatalf("readTokenJSON(%q) accepted %s = %s, not valid UTF-8", body, f.name, raw)
				}
				json.Unmarshal(raw, &want)
			}
			if *f.dst != want {
				t.Errorf("readTokenJSON(%q): %s = %q; want %q", body, f.name, *f.dst, want)
			}
		}
	})
}
