package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"deeplink/internal/store"
)

// The tests in this file go through the real mux, as a game app, a webshop
// and a browser would, and check what API.md §3, §4 and §7 promise.

const (
	storeA     = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	storeB     = "0f8fad5b-d9cb-469f-a165-70867728950e"
	storeNone  = "6ba7b810-9dad-11d1-80b4-00c04fd430c8" // a UUID no store has
	keyA       = "ak_test_store_a_in_clear"
	keyAHashed = "ak_test_store_a_given_as_sha256"
	keyB       = "ak_test_store_b"
	shopCB     = "https://shop.example.com/cb"
)

// rfc7636Verifier and rfc7636Challenge are the example of RFC 7636
// Appendix B: a verifier and its S256 challenge.
const (
	rfc7636Verifier  = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	rfc7636Challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
)

// cfgOpts are the parts of the test configuration that tests vary.
type cfgOpts struct {
	publicBaseURL string // default https://shop.example.com
	gameURL       string // store A's game_authorize_url; default https://game.example.com/oauth/authorize
	authCodeTTL   string // default 5m
	sessionTTL    string // default 24h
	insecure      bool   // webhooks.allow_insecure_urls
	apps          string // the "apps" object; default none
	maxLive       int    // max_live_entries; default the service's
}

// testConfig returns a configuration file with two stores: A, with a key in
// clear, a key given by its SHA-256, an exact redirect domain and a
// *.domain; and B, sharing the exact domain, with its own key.
func testConfig(o cfgOpts) string {
	if o.publicBaseURL == "" {
		o.publicBaseURL = "https://shop.example.com"
	}
	if o.gameURL == "" {
		o.gameURL = "https://game.example.com/oauth/authorize"
	}
	if o.authCodeTTL == "" {
		o.authCodeTTL = "5m"
	}
	if o.sessionTTL == "" {
		o.sessionTTL = "24h"
	}
	if o.apps == "" {
		o.apps = "{}"
	}
	sum := sha256.Sum256([]byte(keyAHashed))
	maxLive := ""
	if o.maxLive > 0 {
		maxLive = fmt.Sprintf(`"max_live_entries": %d,`, o.maxLive)
	}
	return fmt.Sprintf(`{%s
  "public_base_url": %q,
  "auth_code_ttl": %q,
  "session_ttl": %q,
  "webhooks": {"allow_insecure_urls": %t},
  "stores": [
    {
      "id": %q,
      "name": "Store A",
      "api_keys": [%q],
      "api_key_sha256": [%q],
      "redirect_domains": ["shop.example.com", "*.acme.example.com", "127.0.0.1", "localhost"],
      "game_authorize_url": %q
    },
    {
      "id": %q,
      "name": "Store B",
      "api_keys": [%q],
      "redirect_domains": ["shop.example.com"],
      "game_authorize_url": "https://game.example.com/oauth/authorize"
    }
  ],
  "apps": %s
}`, maxLive, o.publicBaseURL, o.authCodeTTL, o.sessionTTL, o.insecure,
		storeA, keyA, hex.EncodeToString(sum[:]), o.gameURL,
		storeB, keyB, o.apps)
}

// newTestApp parses cfgJSON and builds the whole service on a fresh data
// directory; Close runs at the end of the test.
func newTestApp(t *testing.T, cfgJSON string) *app {
	t.Helper()
	cfg, err := ParseConfig([]byte(cfgJSON))
	require.NoError(t, err, "ParseConfig")
	cfg.DataDir = t.TempDir()
	c := &testClock{}
	a, err := newAppAt(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false, c.now)
	require.NoError(t, err, "newApp")
	clocks.Store(a, c)
	t.Cleanup(func() { assert.NoError(t, a.Close(), "app.Close") })
	return a
}

// testClock is the clock of a test's app: the real time, moved on by
// what the test advances it by.
type testClock struct {
	off     atomic.Int64
	stopped atomic.Int64 // unix nanoseconds the clock stands at; 0 while it runs
}

func (c *testClock) now() time.Time {
	if at := c.stopped.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Now().Add(time.Duration(c.off.Load()))
}

// clocks holds the clock of each app newTestApp made.
var clocks sync.Map // *app → *testClock

// stopClock stops the clock of a where it is: what refills or expires
// with time (the guards' budgets) stays as it is, however slow the test.
func stopClock(a *app) {
	c, _ := clocks.Load(a)
	tc := c.(*testClock)
	tc.stopped.Store(tc.now().UnixNano())
}

// advance moves the clock of a's expiries on by d.
func advance(a *app, d time.Duration) {
	c, _ := clocks.Load(a)
	c.(*testClock).off.Add(int64(d))
}

// startService serves the service built from o over plain HTTP.
func startService(t *testing.T, o cfgOpts) (*app, *httptest.Server) {
	t.Helper()
	a := newTestApp(t, testConfig(o))
	ts := httptest.NewServer(a.srv.handler())
	t.Cleanup(ts.Close) // runs before the app's Close
	return a, ts
}

// response is what a test looks at of an answer.
type response struct {
	status int
	header http.Header
	body   []byte
	resp   *http.Response
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       30 * time.Second,
}

func send(t *testing.T, c *http.Client, req *http.Request) response {
	t.Helper()
	if c == nil {
		c = noRedirects
	}
	resp, err := c.Do(req)
	require.NoError(t, err, "%s %s", req.Method, req.URL)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b, resp: resp}
}

// call sends method url with the headers (name, value pairs) and body.
func call(t *testing.T, method, u string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return send(t, nil, req)
}

func registerURL(ts *httptest.Server, store string) string {
	return ts.URL + "/stores/" + store + "/auth/auth-code"
}

func tokenURL(ts *httptest.Server, store string) string {
	return ts.URL + "/stores/" + store + "/auth/token"
}

func meURL(ts *httptest.Server, store string) string {
	return ts.URL + "/stores/" + store + "/auth/me"
}

// postJSON registers body (a string, []byte or anything json.Marshal takes)
// with the given API key, as the game app does.
func postJSON(t *testing.T, u, key string, body any) response {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	return call(t, http.MethodPost, u, bytes.NewReader(b), "X-API-Key", key, "Content-Type", "application/json")
}

// newAuthCode returns a fresh auth code of 43 characters, as a game app
// would make one: 32 random bytes in base64url.
func newAuthCode(t *testing.T) string {
	t.Helper()
	var b [32]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// registration is a valid register body with every optional field set.
func registration(code, challenge string) map[string]any {
	return map[string]any{
		"auth_code":           code,
		"redirect_uri":        shopCB,
		"client_reference_id": "player-42",
		"code_challenge":      challenge,
		"state":               "state-xyz",
		"first_name":          "Ada",
		"last_name":           "Lovelace",
		"language":            "en",
		"currency":            "EUR",
		"country":             "GB",
		"timezone":            "Europe/London",
	}
}

// wantPlayer is the player of registration().
var wantPlayer = map[string]any{
	"client_reference_id": "player-42",
	"first_name":          "Ada",
	"last_name":           "Lovelace",
	"language":            "en",
	"currency":            "EUR",
	"country":             "GB",
	"timezone":            "Europe/London",
}

// registered is a code live at the service and what redeems it.
type registered struct {
	code, verifier, redirectURI string
}

// mustRegister registers a fresh code for store with a fresh verifier.
func mustRegister(t *testing.T, ts *httptest.Server, store, key string) registered {
	t.Helper()
	r := registered{code: newAuthCode(t), verifier: oauth2.GenerateVerifier(), redirectURI: shopCB}
	got := postJSON(t, registerURL(ts, store), key, registration(r.code, oauth2.S256ChallengeFromVerifier(r.verifier)))
	require.Equal(t, http.StatusOK, got.status, "register: %s", got.body)
	return r
}

// form returns the token request parameters that redeem r.
func (r registered) form() url.Values {
	return url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {r.code},
		"redirect_uri":  {r.redirectURI},
		"code_verifier": {r.verifier},
	}
}

func postForm(t *testing.T, u string, v url.Values, headers ...string) response {
	t.Helper()
	return call(t, http.MethodPost, u, strings.NewReader(v.Encode()),
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)...)
}

// apiErrorBody is the error body of API.md §3, decoded strictly.
type apiErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Fields  []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"fields"`
	} `json:"error"`
}

// requireJSON checks that r is application/json (parameters allowed).
func requireJSON(t *testing.T, r response) {
	t.Helper()
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	require.NoError(t, err, "Content-Type %q", r.header.Get("Content-Type"))
	require.Equal(t, "application/json", mt, "Content-Type")
}

// requireAPIError checks r against API.md §3: the status, JSON, the body
// shape with the code and a message, and fields exactly when 422. It
// returns the names of the invalid fields.
func requireAPIError(t *testing.T, r response, status int, code string) []string {
	t.Helper()
	require.Equal(t, status, r.status, "status; body %s", r.body)
	requireJSON(t, r)
	var e apiErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&e), "error body %s", r.body)
	require.Equal(t, code, e.Error.Code, "error.code; body %s", r.body)
	require.NotEmpty(t, e.Error.Message, "error.message")
	var names []string
	for _, f := range e.Error.Fields {
		require.NotEmpty(t, f.Message, "message of field %q", f.Field)
		names = append(names, f.Field)
	}
	if status == http.StatusUnprocessableEntity {
		require.NotEmpty(t, names, "a 422 lists the invalid fields")
	}
	return names
}

// requireOK checks the register endpoint's success answer.
func requireOK(t *testing.T, r response) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "status; body %s", r.body)
	requireJSON(t, r)
	require.JSONEq(t, `{"data":{"status":"ok"}}`, string(r.body))
}

// tokenErrorBody is the OAuth error body of API.md §4.2.
type tokenErrorBody struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

func requireTokenError(t *testing.T, r response, want string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, r.status, "status; body %s", r.body)
	requireJSON(t, r)
	var e tokenErrorBody
	require.NoError(t, json.Unmarshal(r.body, &e), "body %s", r.body)
	require.Equal(t, want, e.Error, "error; body %s", r.body)
	require.NotEmpty(t, e.Description, "error_description")
}

// tokenBody is the success body of the token endpoint.
type tokenBody struct {
	AccessToken string         `json:"access_token"`
	TokenType   string         `json:"token_type"`
	ExpiresIn   *int64         `json:"expires_in"`
	Player      map[string]any `json:"player"`
}

func requireToken(t *testing.T, r response) tokenBody {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "status; body %s", r.body)
	requireJSON(t, r)
	require.Equal(t, "no-store", r.header.Get("Cache-Control"), "Cache-Control")
	var tb tokenBody
	require.NoError(t, json.Unmarshal(r.body, &tb), "body %s", r.body)
	require.NotEmpty(t, tb.AccessToken, "access_token")
	require.Equal(t, "Bearer", tb.TokenType, "token_type")
	require.NotNil(t, tb.ExpiresIn, "expires_in")
	return tb
}

// me asks who the token belongs to at store.
func me(t *testing.T, ts *httptest.Server, store, token string) response {
	t.Helper()
	return call(t, http.MethodGet, meURL(ts, store), nil, "Authorization", "Bearer "+token)
}

func TestRegisterStatusRows(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	valid := func() []byte {
		b, err := json.Marshal(registration(newAuthCode(t), rfc7636Challenge))
		require.NoError(t, err)
		return b
	}
	// bodyOfSize returns a valid registration padded by an ignored field to
	// exactly n bytes.
	bodyOfSize := func(n int) []byte {
		b := valid()
		b = append(b[:len(b)-1], `,"padding":"`...)
		b = append(b, bytes.Repeat([]byte("x"), n-len(b)-2)...)
		b = append(b, `"}`...)
		require.Len(t, b, n)
		return b
	}
	tests := []struct {
		name       string
		store      string
		headers    []string // X-API-Key and Content-Type unless given here
		body       []byte
		chunked    bool // send without Content-Length
		wantStatus int
		wantCode   string // "" for success
	}{
		{name: "valid", body: valid(), wantStatus: 200},
		{name: "key given by api_key_sha256", headers: []string{"X-API-Key", keyAHashed}, body: valid(), wantStatus: 200},
		{name: "charset parameter", headers: []string{"Content-Type", "application/json; charset=utf-8"}, body: valid(), wantStatus: 200},
		{name: "media type in capitals", headers: []string{"Content-Type", "Application/JSON"}, body: valid(), wantStatus: 200},

		{name: "host not in redirect_domains", body: mustJSON(t, withField(registration(newAuthCode(t), rfc7636Challenge), "redirect_uri", "https://other.example.org/cb")), wantStatus: 400, wantCode: "redirect_uri_not_allowed"},

		{name: "array", body: []byte(`[]`), wantStatus: 400, wantCode: "invalid_json"},
		{name: "null", body: []byte(`null`), wantStatus: 400, wantCode: "invalid_json"},
		{name: "string", body: []byte(`"x"`), wantStatus: 400, wantCode: "invalid_json"},
		{name: "number", body: []byte(`42`), wantStatus: 400, wantCode: "invalid_json"},
		{name: "empty body", body: []byte(``), wantStatus: 400, wantCode: "invalid_json"},
		{name: "whitespace only", body: []byte(" \n"), wantStatus: 400, wantCode: "invalid_json"},
		{name: "truncated", body: valid()[:20], wantStatus: 400, wantCode: "invalid_json"},
		{name: "trailing garbage", body: append(valid(), " x"...), wantStatus: 400, wantCode: "invalid_json"},
		{name: "two objects", body: append(valid(), valid()...), wantStatus: 400, wantCode: "invalid_json"},
		{name: "raw control character in a string", body: []byte("{\"auth_code\":\"a\x01b\"}"), wantStatus: 400, wantCode: "invalid_json"},

		{name: "missing key", headers: []string{"X-API-Key", ""}, body: valid(), wantStatus: 401, wantCode: "unauthorized"},
		{name: "wrong key", headers: []string{"X-API-Key", "ak_wrong"}, body: valid(), wantStatus: 401, wantCode: "unauthorized"},
		{name: "other store's key", headers: []string{"X-API-Key", keyB}, body: valid(), wantStatus: 401, wantCode: "unauthorized"},
		{name: "sha256 of the key used as the key", headers: []string{"X-API-Key", hexSHA256(keyAHashed)}, body: valid(), wantStatus: 401, wantCode: "unauthorized"},

		{name: "unknown store, no key", store: storeNone, headers: []string{"X-API-Key", ""}, body: valid(), wantStatus: 404, wantCode: "store_not_found"},
		{name: "unknown store, wrong key", store: storeNone, headers: []string{"X-API-Key", "ak_wrong"}, body: valid(), wantStatus: 404, wantCode: "store_not_found"},
		{name: "store id not a UUID", store: "not-a-store", headers: []string{"X-API-Key", ""}, body: valid(), wantStatus: 404, wantCode: "store_not_found"},

		{name: "body of exactly 64 KiB", body: bodyOfSize(64 << 10), wantStatus: 200},
		{name: "body one byte over 64 KiB", body: bodyOfSize(64<<10 + 1), wantStatus: 413, wantCode: "body_too_large"},
		{name: "chunked body over 64 KiB", body: bodyOfSize(200 << 10), chunked: true, wantStatus: 413, wantCode: "body_too_large"},
		{name: "chunked body within 64 KiB", body: valid(), chunked: true, wantStatus: 200},

		{name: "text/plain", headers: []string{"Content-Type", "text/plain"}, body: valid(), wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "form", headers: []string{"Content-Type", "application/x-www-form-urlencoded"}, body: valid(), wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "missing Content-Type", headers: []string{"Content-Type", ""}, body: valid(), wantStatus: 415, wantCode: "unsupported_media_type"},
		{name: "application/jsonx", headers: []string{"Content-Type", "application/jsonx"}, body: valid(), wantStatus: 415, wantCode: "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := tt.store
			if store == "" {
				store = storeA
			}
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length
			}
			req, err := http.NewRequest(http.MethodPost, registerURL(ts, store), body)
			require.NoError(t, err)
			req.Header.Set("X-API-Key", keyA)
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(tt.headers); i += 2 {
				if tt.headers[i+1] == "" {
					req.Header.Del(tt.headers[i])
				} else {
					req.Header.Set(tt.headers[i], tt.headers[i+1])
				}
			}
			got := send(t, nil, req)
			if tt.wantCode == "" {
				requireOK(t, got)
				return
			}
			requireAPIError(t, got, tt.wantStatus, tt.wantCode)
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// withField returns m with name set to v.
func withField(m map[string]any, name string, v any) map[string]any {
	m[name] = v
	return m
}

// TestRegisterValidation has one row per rule of the table of API.md §4.1,
// with the lengths at their boundaries.
func TestRegisterValidation(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	const del = "\x00delete" // marks a field to leave out
	s := strings.Repeat
	// b64 returns n characters of base64url.
	b64 := func(n int) string { return s("aB3-_", n/5+1)[:n] }
	tests := []struct {
		name       string
		set        map[string]any // fields to change in a valid body
		raw        func([]byte) []byte
		wantFields []string // nil: accepted
	}{
		{name: "all fields valid"},
		{name: "optional fields absent", set: map[string]any{"first_name": del, "last_name": del, "language": del, "currency": del, "country": del, "timezone": del}},
		{name: "optional fields empty", set: map[string]any{"first_name": "", "last_name": "", "language": "", "currency": "", "country": "", "timezone": ""}},
		{name: "optional fields null", set: map[string]any{"first_name": nil, "last_name": nil, "language": nil, "currency": nil, "country": nil, "timezone": nil}},
		{name: "unknown fields ignored", set: map[string]any{"nickname": "x", "age": 3, "nested": map[string]any{"a": 1}}},
		{name: "empty object", raw: func([]byte) []byte { return []byte(`{}`) },
			wantFields: []string{"auth_code", "redirect_uri", "client_reference_id", "code_challenge", "state"}},
		{name: "every field invalid at once", set: map[string]any{
			"auth_code": "short", "redirect_uri": "ftp://shop.example.com/cb", "client_reference_id": "",
			"code_challenge": "abc", "state": "", "first_name": s("a", 256), "last_name": s("b", 256),
			"language": "english!", "currency": "eur", "country": "deu", "timezone": "Mars/Olympus"},
			wantFields: []string{"auth_code", "redirect_uri", "client_reference_id", "code_challenge", "state",
				"first_name", "last_name", "language", "currency", "country", "timezone"}},
		{name: "every field the wrong type at once", set: map[string]any{
			"auth_code": 1234567890123456789, "redirect_uri": true, "client_reference_id": []any{"x"},
			"code_challenge": map[string]any{}, "state": 1.5, "first_name": false, "last_name": []any{},
			"language": 1, "currency": 2, "country": 3, "timezone": 4},
			wantFields: []string{"auth_code", "redirect_uri", "client_reference_id", "code_challenge", "state",
				"first_name", "last_name", "language", "currency", "country", "timezone"}},

		{name: "auth_code missing", set: map[string]any{"auth_code": del}, wantFields: []string{"auth_code"}},
		{name: "auth_code null", set: map[string]any{"auth_code": nil}, wantFields: []string{"auth_code"}},
		{name: "auth_code empty", set: map[string]any{"auth_code": ""}, wantFields: []string{"auth_code"}},
		{name: "auth_code 15 chars", set: map[string]any{"auth_code": s("a", 15)}, wantFields: []string{"auth_code"}},
		{name: "auth_code 16 chars", set: map[string]any{"auth_code": "UNIQUE16"}},
		{name: "auth_code 255 chars", set: map[string]any{"auth_code": "UNIQUE255"}},
		{name: "auth_code 256 chars", set: map[string]any{"auth_code": s("a", 256)}, wantFields: []string{"auth_code"}},
		{name: "auth_code every allowed character", set: map[string]any{"auth_code": "UNIQUEALLCHARS"}},
		{name: "auth_code with space", set: map[string]any{"auth_code": "abcdefgh ijklmnopq"}, wantFields: []string{"auth_code"}},
		{name: "auth_code with slash and plus", set: map[string]any{"auth_code": "abcdefgh/ijkl+mnopq"}, wantFields: []string{"auth_code"}},
		{name: "auth_code non-ASCII", set: map[string]any{"auth_code": "abcdefghijklmnopä"}, wantFields: []string{"auth_code"}},
		{name: "auth_code a number", set: map[string]any{"auth_code": 12345678901234567}, wantFields: []string{"auth_code"}},

		{name: "redirect_uri missing", set: map[string]any{"redirect_uri": del}, wantFields: []string{"redirect_uri"}},
		{name: "redirect_uri relative", set: map[string]any{"redirect_uri": "/cb"}, wantFields: []string{"redirect_uri"}},
		{name: "redirect_uri 2048 chars", set: map[string]any{"redirect_uri": "https://shop.example.com/" + s("p", 2048-25)}},
		{name: "redirect_uri 2049 chars", set: map[string]any{"redirect_uri": "https://shop.example.com/" + s("p", 2049-25)}, wantFields: []string{"redirect_uri"}},
		{name: "redirect_uri 2048 chars, non-ASCII", set: map[string]any{"redirect_uri": "https://shop.example.com/" + s("é", 2048-25)}},
		{name: "redirect_uri 2049 chars, non-ASCII", set: map[string]any{"redirect_uri": "https://shop.example.com/" + s("é", 2049-25)}, wantFields: []string{"redirect_uri"}},

		{name: "client_reference_id missing", set: map[string]any{"client_reference_id": del}, wantFields: []string{"client_reference_id"}},
		{name: "client_reference_id empty", set: map[string]any{"client_reference_id": ""}, wantFields: []string{"client_reference_id"}},
		{name: "client_reference_id 1 char", set: map[string]any{"client_reference_id": "x"}},
		{name: "client_reference_id 255 chars", set: map[string]any{"client_reference_id": s("c", 255)}},
		{name: "client_reference_id 255 non-ASCII chars", set: map[string]any{"client_reference_id": s("ä", 255)}},
		{name: "client_reference_id 256 chars", set: map[string]any{"client_reference_id": s("c", 256)}, wantFields: []string{"client_reference_id"}},
		{name: "client_reference_id 256 non-ASCII chars", set: map[string]any{"client_reference_id": s("ä", 256)}, wantFields: []string{"client_reference_id"}},
		{name: "client_reference_id a number", set: map[string]any{"client_reference_id": 42}, wantFields: []string{"client_reference_id"}},

		{name: "code_challenge missing", set: map[string]any{"code_challenge": del}, wantFields: []string{"code_challenge"}},
		{name: "code_challenge 42 chars", set: map[string]any{"code_challenge": b64(42)}, wantFields: []string{"code_challenge"}},
		{name: "code_challenge 43 chars", set: map[string]any{"code_challenge": b64(43)}},
		{name: "code_challenge 44 chars", set: map[string]any{"code_challenge": b64(44)}, wantFields: []string{"code_challenge"}},
		{name: "code_challenge with padding", set: map[string]any{"code_challenge": b64(42) + "="}, wantFields: []string{"code_challenge"}},
		{name: "code_challenge standard base64", set: map[string]any{"code_challenge": b64(41) + "+/"}, wantFields: []string{"code_challenge"}},
		{name: "code_challenge the plain verifier length 128", set: map[string]any{"code_challenge": b64(128)}, wantFields: []string{"code_challenge"}},

		{name: "state missing", set: map[string]any{"state": del}, wantFields: []string{"state"}},
		{name: "state empty", set: map[string]any{"state": ""}, wantFields: []string{"state"}},
		{name: "state 1 char", set: map[string]any{"state": "s"}},
		{name: "state 1024 chars", set: map[string]any{"state": s("s", 1024)}},
		{name: "state 1025 chars", set: map[string]any{"state": s("s", 1025)}, wantFields: []string{"state"}},

		{name: "first_name 255 chars", set: map[string]any{"first_name": s("f", 255)}},
		{name: "first_name 256 chars", set: map[string]any{"first_name": s("f", 256)}, wantFields: []string{"first_name"}},
		{name: "last_name 255 chars", set: map[string]any{"last_name": s("l", 255)}},
		{name: "last_name 256 chars", set: map[string]any{"last_name": s("l", 256)}, wantFields: []string{"last_name"}},
		{name: "names non-ASCII", set: map[string]any{"first_name": "Zoë", "last_name": "Łukasiewicz 李"}},

		{name: "language en", set: map[string]any{"language": "en"}},
		{name: "language pt-BR", set: map[string]any{"language": "pt-BR"}},
		{name: "language 10 chars", set: map[string]any{"language": "zh-Hant-TW"}},
		{name: "language 11 chars", set: map[string]any{"language": "zh-Hant-TWX"}, wantFields: []string{"language"}},
		{name: "language english!", set: map[string]any{"language": "english!"}, wantFields: []string{"language"}},
		{name: "language with underscore", set: map[string]any{"language": "pt_BR"}, wantFields: []string{"language"}},

		{name: "currency EUR", set: map[string]any{"currency": "EUR"}},
		{name: "currency eur", set: map[string]any{"currency": "eur"}, wantFields: []string{"currency"}},
		{name: "currency EURO", set: map[string]any{"currency": "EURO"}, wantFields: []string{"currency"}},
		{name: "currency EU", set: map[string]any{"currency": "EU"}, wantFields: []string{"currency"}},
		{name: "currency digits", set: map[string]any{"currency": "978"}, wantFields: []string{"currency"}},

		{name: "country DE", set: map[string]any{"country": "DE"}},
		{name: "country de", set: map[string]any{"country": "de"}, wantFields: []string{"country"}},
		{name: "country DEU", set: map[string]any{"country": "DEU"}, wantFields: []string{"country"}},
		{name: "country D", set: map[string]any{"country": "D"}, wantFields: []string{"country"}},

		{name: "timezone Europe/Berlin", set: map[string]any{"timezone": "Europe/Berlin"}},
		{name: "timezone UTC", set: map[string]any{"timezone": "UTC"}},
		{name: "timezone America/Argentina/Buenos_Aires", set: map[string]any{"timezone": "America/Argentina/Buenos_Aires"}},
		{name: "timezone Mars/Olympus", set: map[string]any{"timezone": "Mars/Olympus"}, wantFields: []string{"timezone"}},
		{name: "timezone Local is not IANA", set: map[string]any{"timezone": "Local"}, wantFields: []string{"timezone"}},
		{name: "timezone a path", set: map[string]any{"timezone": "../../etc/passwd"}, wantFields: []string{"timezone"}},
		{name: "timezone 65 chars", set: map[string]any{"timezone": "Europe/" + s("x", 58)}, wantFields: []string{"timezone"}},

		{name: "invalid UTF-8 in first_name", raw: func(b []byte) []byte { return bytes.Replace(b, []byte(`"Ada"`), []byte("\"A\xffda\""), 1) }, wantFields: []string{"first_name"}},
		{name: "invalid UTF-8 in state", raw: func(b []byte) []byte { return bytes.Replace(b, []byte(`"state-xyz"`), []byte("\"st\xc3\x28\""), 1) }, wantFields: []string{"state"}},
		{name: "escaped lone high surrogate in client_reference_id", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"player-42"`), []byte(`"player-\ud83d"`), 1)
		}, wantFields: []string{"client_reference_id"}},
		{name: "escaped lone low surrogate in state", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"state-xyz"`), []byte(`"state-\ude00"`), 1)
		}, wantFields: []string{"state"}},
		{name: "escaped surrogate pair in first_name", raw: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"Ada"`), []byte(`"Ada \ud83d\ude00"`), 1)
		}},
		{name: "escaped control character", set: map[string]any{"first_name": "A\u0001da"}, wantFields: []string{"first_name"}},
		{name: "newline in client_reference_id", set: map[string]any{"client_reference_id": "player\n42"}, wantFields: []string{"client_reference_id"}},
		{name: "tab in state", set: map[string]any{"state": "a\tb"}, wantFields: []string{"state"}},
		{name: "NUL in last_name", set: map[string]any{"last_name": "a\x00b"}, wantFields: []string{"last_name"}},
		{name: "DEL in last_name", set: map[string]any{"last_name": "a\x7fb"}, wantFields: []string{"last_name"}},
		{name: "C1 control in first_name", set: map[string]any{"first_name": "a\u0085b"}, wantFields: []string{"first_name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := registration(newAuthCode(t), rfc7636Challenge)
			for k, v := range tt.set {
				switch v {
				case del:
					delete(body, k)
				case "UNIQUE16", "UNIQUE255", "UNIQUEALLCHARS":
					// A fresh code of the length wanted, so rows never collide.
					code := strings.Repeat(newAuthCode(t), 6)
					switch v {
					case "UNIQUE16":
						code = code[:16]
					case "UNIQUE255":
						code = code[:255]
					default:
						code = "AZaz09-._~" + code[:20]
					}
					body[k] = code
				default:
					body[k] = v
				}
			}
			b := mustJSON(t, body)
			if tt.raw != nil {
				b = tt.raw(b)
			}
			got := postJSON(t, registerURL(ts, storeA), keyA, b)
			if tt.wantFields == nil {
				requireOK(t, got)
				return
			}
			fields := requireAPIError(t, got, http.StatusUnprocessableEntity, "validation_failed")
			assert.ElementsMatch(t, tt.wantFields, fields, "invalid fields")
		})
	}
}

// TestRegisterRedirectURI checks the host rule of API.md §4.1 and every
// trap it names: never 200, and 400 exactly when the URL is well formed.
func TestRegisterRedirectURI(t *testing.T) {
	const refused = -1 // 400 or 422, never 200
	tests := []struct {
		uri      string
		insecure bool
		want     int
	}{
		{uri: "https://shop.example.com/cb", want: 200},
		{uri: "https://shop.example.com", want: 200},
		{uri: "https://shop.example.com/cb?x=1&y=2", want: 200},
		{uri: "https://SHOP.example.com/cb", want: 200},
		{uri: "https://Shop.Example.COM/cb", want: 200},
		{uri: "https://shop.example.com:8443/cb", want: 200},
		{uri: "https://shop.example.com:443/cb", want: 200},
		{uri: "https://a.acme.example.com/cb", want: 200},
		{uri: "https://x.y.acme.example.com/cb", want: 200},
		{uri: "https://A.ACME.example.com/cb", want: 200},

		{uri: "https://acme.example.com/cb", want: 400},
		{uri: "https://shop.example.com.evil.com/cb", want: 400},
		{uri: "https://evilshop.example.com/cb", want: 400},
		{uri: "https://evil.com/cb", want: 400},
		{uri: "https://evilacme.example.com/cb", want: 400},
		{uri: "https://example.com/cb", want: 400},
		{uri: "https://sub.shop.example.com/cb", want: 400},

		{uri: "https://shop.example.com@evil.com/cb", want: refused},
		{uri: "https://user@shop.example.com/cb", want: refused},
		{uri: "https://user:pass@shop.example.com/cb", want: refused},
		{uri: "https://shop.example.com:443@evil.com/cb", want: refused},
		{uri: `https://evil.com\@shop.example.com/`, want: refused},
		{uri: `https://shop.example.com\.evil.com/`, want: refused},
		{uri: "https://shop.example.com./cb", want: refused},
		{uri: "https://a.acme.example.com./cb", want: refused},
		{uri: "https://shöp.example.com/", want: refused},
		{uri: "https://shoр.example.com/cb", want: refused}, // Cyrillic р
		{uri: "https://xn--shp-sna.example.com/", want: 400},
		{uri: "https://shop%2eexample.com/", want: refused},
		{uri: "https://%73hop.example.com/", want: refused},
		{uri: "https://shop.example.com%40evil.com/", want: refused},
		{uri: "https:shop.example.com/cb", want: refused},
		{uri: "https:/shop.example.com", want: refused},
		{uri: "https:///shop.example.com/cb", want: refused},
		{uri: "//shop.example.com/cb", want: refused},
		{uri: "shop.example.com/cb", want: refused},
		{uri: "http://shop.example.com/cb", want: refused},
		{uri: "ftp://shop.example.com/cb", want: refused},
		{uri: "javascript://shop.example.com/%0aalert(1)", want: refused},
		{uri: "https://shop.example.com/cb#frag", want: refused},
		{uri: "https://shop.example.com/cb#", want: refused},
		{uri: "https://shop.example.com /cb", want: refused},
		{uri: "https://[::1]/cb", want: refused},
		{uri: "https://shop.example.com:0/cb", want: refused},
		{uri: "https://shop.example.com:99999/cb", want: refused},
		{uri: "https://shop.example.com:x/cb", want: refused},
		{uri: "https://127.0.0.1/cb", want: 200}, // listed as a domain in the test config
		{uri: "http://localhost/cb", want: refused},
		{uri: "http://127.0.0.1:8080/cb", want: refused},

		{uri: "http://localhost:8080/cb", insecure: true, want: 200},
		{uri: "http://127.0.0.1:8080/cb", insecure: true, want: 200},
		{uri: "http://shop.example.com/cb", insecure: true, want: refused},
		{uri: "https://shop.example.com/cb", insecure: true, want: 200},
	}
	_, secure := startService(t, cfgOpts{})
	_, insecure := startService(t, cfgOpts{insecure: true})
	for _, tt := range tests {
		name := tt.uri
		if tt.insecure {
			name += " with allow_insecure_urls"
		}
		t.Run(name, func(t *testing.T) {
			ts := secure
			if tt.insecure {
				ts = insecure
			}
			body := registration(newAuthCode(t), rfc7636Challenge)
			body["redirect_uri"] = tt.uri
			got := postJSON(t, registerURL(ts, storeA), keyA, body)
			switch tt.want {
			case 200:
				requireOK(t, got)
			case 400:
				requireAPIError(t, got, http.StatusBadRequest, "redirect_uri_not_allowed")
			case refused:
				switch got.status {
				case http.StatusBadRequest:
					requireAPIError(t, got, http.StatusBadRequest, "redirect_uri_not_allowed")
				case http.StatusUnprocessableEntity:
					fields := requireAPIError(t, got, http.StatusUnprocessableEntity, "validation_failed")
					assert.Equal(t, []string{"redirect_uri"}, fields)
				default:
					t.Fatalf("register with redirect_uri %q = %d %s; want 400 or 422", tt.uri, got.status, got.body)
				}
			}
		})
	}
}

// TestRegisterConflict: a second registration of a live code is 409 and
// leaves the first as it was; other stores and expired codes do not
// conflict.
func TestRegisterConflict(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	first := mustRegister(t, ts, storeA, keyA)

	// The same code again, with everything else different.
	otherVerifier := oauth2.GenerateVerifier()
	second := map[string]any{
		"auth_code":           first.code,
		"redirect_uri":        "https://a.acme.example.com/other",
		"client_reference_id": "attacker",
		"code_challenge":      oauth2.S256ChallengeFromVerifier(otherVerifier),
		"state":               "other-state",
	}
	requireAPIError(t, postJSON(t, registerURL(ts, storeA), keyA, second), http.StatusConflict, "auth_code_conflict")
	// Also with the store's other key: conflicts are per store, not per key.
	requireAPIError(t, postJSON(t, registerURL(ts, storeA), keyAHashed, second), http.StatusConflict, "auth_code_conflict")

	// Store B may use the same code string for its own player.
	bVerifier := oauth2.GenerateVerifier()
	bBody := registration(first.code, oauth2.S256ChallengeFromVerifier(bVerifier))
	bBody["client_reference_id"] = "player-of-b"
	requireOK(t, postJSON(t, registerURL(ts, storeB), keyB, bBody))

	// The first registration's verifier and redirect_uri still redeem it,
	// for the first registration's player.
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), first.form()))
	assert.Equal(t, wantPlayer, tok.Player)

	// And B's code is B's own.
	bForm := registered{code: first.code, verifier: bVerifier, redirectURI: shopCB}.form()
	tokB := requireToken(t, postForm(t, tokenURL(ts, storeB), bForm))
	assert.Equal(t, "player-of-b", tokB.Player["client_reference_id"])
}

func TestRegisterExpiredCodeDoesNotConflict(t *testing.T) {
	_, ts := startService(t, cfgOpts{authCodeTTL: "1ns"})
	code := newAuthCode(t)
	requireOK(t, postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge)))
	// 1ns has passed by now: the first is no longer live.
	requireOK(t, postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge)))
}

// TestRegisterRedeemedCode registers a code again once it signed someone
// in: 409 while it is live (auth_code_ttl, API.md §3), 200 after, though
// its token, which lives on, is still revoked by a replay (the replay key).
func TestRegisterRedeemedCode(t *testing.T) {
	a, ts := startService(t, cfgOpts{authCodeTTL: "5m", sessionTTL: "24h"})
	for _, tt := range []struct {
		name  string
		after time.Duration // from the redemption
		want  int
	}{
		{"while live", time.Minute, http.StatusConflict},
		{"past auth_code_ttl", 5*time.Minute + time.Second, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRegister(t, ts, storeA, keyA)
			tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
			advance(a, tt.after)
			got := postJSON(t, registerURL(ts, storeA), keyA, registration(r.code, rfc7636Challenge))
			require.Equal(t, tt.want, got.status, "registering it again: %s", got.body)
			require.Equal(t, http.StatusOK, me(t, ts, storeA, tok.AccessToken).status, "/me with the first token")
		})
	}
}

func TestRegisterWhileShuttingDown(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	a.srv.draining.Store(true)
	got := postJSON(t, registerURL(ts, storeA), keyA, registration(newAuthCode(t), rfc7636Challenge))
	requireAPIError(t, got, http.StatusServiceUnavailable, "unavailable")
	assert.NotEmpty(t, got.header.Get("Retry-After"), "Retry-After")
}

func TestToken(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	tests := []struct {
		name    string
		edit    func(r registered, f url.Values)
		json    bool   // send the parameters as a JSON object
		ctype   string // Content-Type, when not the usual one
		wantErr string // "" for success
	}{
		{name: "form"},
		{name: "json", json: true},
		{name: "json with charset", json: true, ctype: "application/json; charset=utf-8"},
		{name: "form with charset", ctype: "application/x-www-form-urlencoded; charset=utf-8"},
		{name: "client_id ignored", edit: func(_ registered, f url.Values) { f.Set("client_id", "webshop") }},
		{name: "client_id ignored in json", json: true, edit: func(_ registered, f url.Values) { f.Set("client_id", "webshop") }},

		{name: "grant_type password", edit: func(_ registered, f url.Values) { f.Set("grant_type", "password") }, wantErr: "unsupported_grant_type"},
		{name: "grant_type refresh_token", edit: func(_ registered, f url.Values) { f.Set("grant_type", "refresh_token") }, wantErr: "unsupported_grant_type"},
		{name: "grant_type missing", edit: func(_ registered, f url.Values) { f.Del("grant_type") }, wantErr: "invalid_request"},
		{name: "code missing", edit: func(_ registered, f url.Values) { f.Del("code") }, wantErr: "invalid_request"},
		{name: "code_verifier missing", edit: func(_ registered, f url.Values) { f.Del("code_verifier") }, wantErr: "invalid_request"},
		{name: "redirect_uri missing", edit: func(_ registered, f url.Values) { f.Del("redirect_uri") }, wantErr: "invalid_request"},
		{name: "code_verifier missing in json", json: true, edit: func(_ registered, f url.Values) { f.Del("code_verifier") }, wantErr: "invalid_request"},
		{name: "code repeated", edit: func(r registered, f url.Values) { f.Add("code", r.code) }, wantErr: "invalid_request"},
		{name: "client_id repeated", edit: func(_ registered, f url.Values) { f.Add("client_id", "a"); f.Add("client_id", "b") }, wantErr: "invalid_request"},
		{name: "text/plain body", ctype: "text/plain", wantErr: "invalid_request"},
		{name: "no Content-Type", ctype: "-", wantErr: "invalid_request"},

		{name: "unknown code", edit: func(_ registered, f url.Values) { f.Set("code", "never-registered-code-123") }, wantErr: "invalid_grant"},
		{name: "wrong verifier", edit: func(_ registered, f url.Values) { f.Set("code_verifier", oauth2.GenerateVerifier()) }, wantErr: "invalid_grant"},
		{name: "challenge sent as verifier", edit: func(_ registered, f url.Values) {
			f.Set("code_verifier", oauth2.S256ChallengeFromVerifier(f.Get("code_verifier")))
		}, wantErr: "invalid_grant"},
		{name: "different redirect_uri", edit: func(_ registered, f url.Values) { f.Set("redirect_uri", "https://shop.example.com/other") }, wantErr: "invalid_grant"},
		{name: "redirect_uri with extra slash", edit: func(_ registered, f url.Values) { f.Set("redirect_uri", shopCB+"/") }, wantErr: "invalid_grant"},
		{name: "wrong verifier in json", json: true, edit: func(_ registered, f url.Values) { f.Set("code_verifier", oauth2.GenerateVerifier()) }, wantErr: "invalid_grant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRegister(t, ts, storeA, keyA)
			f := r.form()
			if tt.edit != nil {
				tt.edit(r, f)
			}
			var body []byte
			ctype := "application/x-www-form-urlencoded"
			if tt.json {
				m := map[string]string{}
				for k := range f {
					m[k] = f.Get(k)
				}
				body, ctype = mustJSON(t, m), "application/json"
			} else {
				body = []byte(f.Encode())
			}
			if tt.ctype != "" {
				ctype = tt.ctype
			}
			req, err := http.NewRequest(http.MethodPost, tokenURL(ts, storeA), bytes.NewReader(body))
			require.NoError(t, err)
			if ctype != "-" {
				req.Header.Set("Content-Type", ctype)
			}
			got := send(t, nil, req)
			if tt.wantErr != "" {
				requireTokenError(t, got, tt.wantErr)
				return
			}
			tok := requireToken(t, got)
			assert.Equal(t, int64(24*60*60), *tok.ExpiresIn, "expires_in for session_ttl 24h")
			assert.Equal(t, wantPlayer, tok.Player)
		})
	}
}

// TestTokenJSONNotAnAttempt sends JSON bodies that cannot be read as one
// token request: each is 400 invalid_request and uses nothing up, so the
// code then redeems. encoding/json alone would have let the last of two
// codes, a "CODE", a non-string client_id or a code cut mid-emoji through.
func TestTokenJSONNotAnAttempt(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	// %[1]s is the code, %[2]s the verifier, %[3]s the redirect_uri.
	const rest = `"code_verifier":"%[2]s","redirect_uri":"%[3]s"`
	tests := []struct{ name, body string }{
		{"code repeated", `{"grant_type":"authorization_code","code":"never-registered-code-1","code":"%[1]s",` + rest + `}`},
		{"code repeated, the same", `{"grant_type":"authorization_code","code":"%[1]s","code":"%[1]s",` + rest + `}`},
		{"grant_type repeated", `{"grant_type":"password","grant_type":"authorization_code","code":"%[1]s",` + rest + `}`},
		{"CODE for code", `{"grant_type":"authorization_code","CODE":"%[1]s",` + rest + `}`},
		{"a number", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `,"client_id":5}`},
		{"client_id repeated", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `,"client_id":"a","client_id":"a"}`},
		{"an unknown member repeated", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `,"x":{},"x":{}}`},
		{"an array", `{"grant_type":"authorization_code","code":["%[1]s"],` + rest + `}`},
		{"code with a lone surrogate", `{"grant_type":"authorization_code","code":"%[1]s\ud83d",` + rest + `}`},
		{"code with invalid UTF-8", "{\"grant_type\":\"authorization_code\",\"code\":\"%[1]s\xff\"," + rest + `}`},
		{"invalid UTF-8 in an unknown member", "{\"grant_type\":\"authorization_code\",\"code\":\"%[1]s\"," + rest + ",\"x\":[\"\xff\"]}"},
		{"invalid UTF-8 in a name", "{\"grant_type\":\"authorization_code\",\"code\":\"%[1]s\"," + rest + ",\"\xff\":\"\"}"},
		{"trailing data", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `} x`},
		{"two objects", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `}{}`},
		{"not an object", `["grant_type","authorization_code","code","%[1]s"]`},
		{"trailing comma", `{"grant_type":"authorization_code","code":"%[1]s",` + rest + `,}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRegister(t, ts, storeA, keyA)
			body := fmt.Sprintf(tt.body, r.code, r.verifier, r.redirectURI)
			req, err := http.NewRequest(http.MethodPost, tokenURL(ts, storeA), strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			requireTokenError(t, send(t, nil, req), "invalid_request")
			requireToken(t, postForm(t, tokenURL(ts, storeA), r.form())) // the code was not used up
		})
	}
}

// TestTokenMissingParameterNotAnAttempt leaves out a parameter the
// exchange needs: the request is malformed, not an attempt, so the code is
// not used up, and a live code gets the very answer an unknown one does.
func TestTokenMissingParameterNotAnAttempt(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	for _, tt := range []struct{ name, param string }{
		{"redirect_uri missing", "redirect_uri"},
		{"code_verifier missing", "code_verifier"},
		{"redirect_uri empty", "redirect_uri="},
		{"code_verifier empty", "code_verifier="},
	} {
		t.Run(tt.name, func(t *testing.T) {
			edit := func(f url.Values) {
				if name, ok := strings.CutSuffix(tt.param, "="); ok {
					f.Set(name, "")
				} else {
					f.Del(tt.param)
				}
			}
			live := mustRegister(t, ts, storeA, keyA)
			unknown := registered{code: newAuthCode(t), verifier: live.verifier, redirectURI: live.redirectURI}
			var answers []string
			for _, r := range []registered{live, unknown} {
				f := r.form()
				edit(f)
				got := postForm(t, tokenURL(ts, storeA), f)
				requireTokenError(t, got, "invalid_request")
				answers = append(answers, string(got.body))
			}
			assert.Equal(t, answers[1], answers[0], "the answer for a live code; want the one for an unknown code")
			requireToken(t, postForm(t, tokenURL(ts, storeA), live.form())) // not used up
		})
	}
}

// TestTokenRFC7636Example redeems with the verifier and challenge of RFC
// 7636 Appendix B, so the S256 check is held to the standard's own numbers.
func TestTokenRFC7636Example(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := registered{code: newAuthCode(t), verifier: rfc7636Verifier, redirectURI: shopCB}
	requireOK(t, postJSON(t, registerURL(ts, storeA), keyA, registration(r.code, rfc7636Challenge)))
	requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
}

func TestTokenExpiresInFollowsSessionTTL(t *testing.T) {
	_, ts := startService(t, cfgOpts{sessionTTL: "90m"})
	r := mustRegister(t, ts, storeA, keyA)
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
	assert.Equal(t, int64(90*60), *tok.ExpiresIn)
}

func TestTokenPlayerWithoutOptionalFields(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	verifier := oauth2.GenerateVerifier()
	code := newAuthCode(t)
	requireOK(t, postJSON(t, registerURL(ts, storeA), keyA, map[string]any{
		"auth_code": code, "redirect_uri": shopCB, "client_reference_id": "p-7",
		"code_challenge": oauth2.S256ChallengeFromVerifier(verifier), "state": "s",
	}))
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), registered{code, verifier, shopCB}.form()))
	assert.Equal(t, "p-7", tok.Player["client_reference_id"])
}

func TestTokenOtherStoresCode(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	requireTokenError(t, postForm(t, tokenURL(ts, storeB), r.form()), "invalid_grant")
	requireTokenError(t, postForm(t, tokenURL(ts, storeNone), r.form()), "invalid_grant")
}

func TestTokenExpiredCode(t *testing.T) {
	_, ts := startService(t, cfgOpts{authCodeTTL: "1ns"})
	// With a TTL of 1ns the code has expired before the request that
	// registers it has even been answered.
	r := mustRegister(t, ts, storeA, keyA)
	requireTokenError(t, postForm(t, tokenURL(ts, storeA), r.form()), "invalid_grant")
}

// TestTokenUnavailable checks the token endpoint's 503s: like every 503 of
// API.md §3 they carry Retry-After, in the OAuth error body of §4.2.
func TestTokenUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  cfgOpts
		spoil func(a *app)
	}{
		{"shutting down", cfgOpts{}, func(a *app) { a.srv.draining.Store(true) }},
		{"no room for the replay key", cfgOpts{maxLive: 4}, func(*app) {}}, // the cookie key, the two stores' settings and the code fill the store
		{"no room for the session", cfgOpts{maxLive: 5}, func(*app) {}},    // the replay key fills it
		{"cannot write the redemption", cfgOpts{}, func(a *app) {
			a.srv.store = failingCAS{a.srv.store}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, ts := startService(t, tt.opts)
			r := mustRegister(t, ts, storeA, keyA)
			tt.spoil(a)
			got := postForm(t, tokenURL(ts, storeA), r.form())
			require.Equal(t, http.StatusServiceUnavailable, got.status, "status; body %s", got.body)
			requireJSON(t, got)
			var e tokenErrorBody
			require.NoError(t, json.Unmarshal(got.body, &e), "body %s", got.body)
			assert.Equal(t, "temporarily_unavailable", e.Error, "error")
			assert.NotEmpty(t, e.Description, "error_description")
			assert.NotEmpty(t, got.header.Get("Retry-After"), "Retry-After")
			// A fairness counter is left out: a request whose tally is
			// older than tallyEvery (a slow run) adds it to the store.
			counters := a.db.Count(limitPrefix, func([]byte) bool { return true })
			assert.Equal(t, 4, a.db.Len()-counters, "entries left: the cookie key, the two stores' settings and the code, and no replay key naming no token")
		})
	}
}

// TestTokenCodeExpiresMidRedemption lets the code's TTL run out while a
// redemption that found it live is still storing the session (a GC pause,
// a descheduled thread): the token it answers must work.
func TestTokenCodeExpiresMidRedemption(t *testing.T) {
	// Long enough for the redemption to find the code live on a loaded
	// machine, short of redeemGrace, which the pause must not pass.
	const ttl = 10 * time.Second
	a, ts := startService(t, cfgOpts{authCodeTTL: ttl.String()})
	r := mustRegister(t, ts, storeA, keyA)
	a.srv.store = slowSessions{Store: a.srv.store, pause: func() { advance(a, ttl+50*time.Millisecond) }}
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
	assert.Equal(t, http.StatusOK, me(t, ts, storeA, tok.AccessToken).status, "/me with the token answered")
}

// TestTokenAttemptsDoNotProlongTheCode checks who moves a code's expiry:
// the winning redemption, to redeemGrace from then (so that it cannot
// find its own code expired), and nobody else: a failed attempt or a
// replay leaves it, or the code's key could be kept taken for good by
// attempts. Registering the code again tells: 409 while its key is live.
func TestTokenAttemptsDoNotProlongTheCode(t *testing.T) {
	const ttl = 30 * time.Second // shorter than redeemGrace
	a, ts := startService(t, cfgOpts{authCodeTTL: ttl.String()})
	registerAgain := func(code string) int {
		return postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge)).status
	}

	failed := mustRegister(t, ts, storeA, keyA)
	bad := failed.form()
	bad.Set("code_verifier", oauth2.GenerateVerifier())
	requireTokenError(t, postForm(t, tokenURL(ts, storeA), bad), "invalid_grant")
	advance(a, ttl)
	assert.Equal(t, http.StatusOK, registerAgain(failed.code), "registering again at the TTL after a failed attempt")

	won := mustRegister(t, ts, storeA, keyA)
	requireToken(t, postForm(t, tokenURL(ts, storeA), won.form()))
	for range 3 {
		requireTokenError(t, postForm(t, tokenURL(ts, storeA), won.form()), "invalid_grant")
	}
	advance(a, redeemGrace-time.Second)
	assert.Equal(t, http.StatusConflict, registerAgain(won.code), "registering again within redeemGrace of the winning redemption")
	advance(a, 2*time.Second)
	assert.Equal(t, http.StatusOK, registerAgain(won.code), "registering again after redeemGrace, replays in between")
}

// slowSessions is a store whose Insert of a session first pauses: the
// pause of a redemption just before it stores its session.
type slowSessions struct {
	store.Store
	pause func()
}

func (s slowSessions) Insert(ctx context.Context, k string, val []byte, exp time.Time) error {
	if len(val) > 0 && val[0] == kindSession {
		s.pause()
	}
	return s.Store.Insert(ctx, k, val, exp)
}

// failingCAS is a store that cannot write a CompareAndSwap.
type failingCAS struct{ store.Store }

func (failingCAS) CompareAndSwap(context.Context, string, []byte, []byte, time.Time) error {
	return fmt.Errorf("%w: disk gone", store.ErrUnavailable)
}

func TestTokenFailedAttemptConsumesCode(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	for _, tt := range []struct {
		name string
		bad  func(url.Values)
	}{
		{"wrong verifier", func(f url.Values) { f.Set("code_verifier", oauth2.GenerateVerifier()) }},
		{"different redirect_uri", func(f url.Values) { f.Set("redirect_uri", "https://a.acme.example.com/cb") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRegister(t, ts, storeA, keyA)
			bad := r.form()
			tt.bad(bad)
			requireTokenError(t, postForm(t, tokenURL(ts, storeA), bad), "invalid_grant")
			requireTokenError(t, postForm(t, tokenURL(ts, storeA), r.form()), "invalid_grant")
		})
	}
}

// TestTokenReplayRevokes replays a redeemed code, which API.md §4.2 says
// revokes the token it issued, whenever the replay comes while that token
// lives: the sweep is run as of the replay's time, so what the store would
// have forgotten by then is gone.
func TestTokenReplayRevokes(t *testing.T) {
	a, ts := startService(t, cfgOpts{authCodeTTL: "5m", sessionTTL: "24h"})
	for _, tt := range []struct {
		name  string
		after time.Duration // from the redemption to the replay
	}{
		{"at once", 0},
		{"once the code would have expired", 5*time.Minute + time.Second},
		{"an hour later", time.Hour},
		{"just before the token expires", 24*time.Hour - time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRegister(t, ts, storeA, keyA)
			tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
			advance(a, tt.after)
			require.Equal(t, http.StatusOK, me(t, ts, storeA, tok.AccessToken).status, "/me before the replay")

			requireTokenError(t, postForm(t, tokenURL(ts, storeA), r.form()), "invalid_grant")
			requireAPIError(t, me(t, ts, storeA, tok.AccessToken), http.StatusUnauthorized, "unauthorized")
			// A third attempt is refused as well.
			requireTokenError(t, postForm(t, tokenURL(ts, storeA), r.form()), "invalid_grant")
		})
	}
}

// TestTokenConcurrentRedemptions races 100 redemptions of one code, all with
// the right verifier: exactly one wins and gets the code's one token. Each
// attempt after the first is a replay, which API.md §4.2 says revokes that
// token, so it is dead once all have answered, whatever the interleaving.
func TestTokenConcurrentRedemptions(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	body := r.form().Encode()
	const n = 100
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		tokens  []string
		others  = map[string]int{}
		start   = make(chan struct{})
		client  = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}, Timeout: 30 * time.Second}
		failure = make(chan error, n)
	)
	defer client.CloseIdleConnections()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := client.Post(tokenURL(ts, storeA), "application/x-www-form-urlencoded", strings.NewReader(body))
			if err != nil {
				failure <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				failure <- err
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode == http.StatusOK {
				var tb tokenBody
				if err := json.Unmarshal(b, &tb); err != nil || tb.AccessToken == "" {
					failure <- fmt.Errorf("200 without a token: %s", b)
					return
				}
				tokens = append(tokens, tb.AccessToken)
				return
			}
			var e tokenErrorBody
			json.Unmarshal(b, &e)
			others[fmt.Sprintf("%d %s", resp.StatusCode, e.Error)]++
		}()
	}
	close(start)
	wg.Wait()
	close(failure)
	for err := range failure {
		t.Error(err)
	}
	require.Len(t, tokens, 1, "redemptions answered 200")
	assert.Equal(t, map[string]int{"400 invalid_grant": n - 1}, others, "the other answers")
	for _, tok := range tokens {
		requireAPIError(t, me(t, ts, storeA, tok), http.StatusUnauthorized, "unauthorized")
	}
}

func TestTokenCORS(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	tests := []struct {
		origin string
		allow  bool
	}{
		{"https://shop.example.com", true},
		{"https://shop.example.com:8443", true},
		{"https://a.acme.example.com", true},
		{"https://evil.example.com", false},
		{"https://acme.example.com", false},
		{"https://shop.example.com.evil.com", false},
		{"http://shop.example.com", false},
		{"null", false},
		// Parsed, these name an allowed host; as origins they are not
		// ones a browser sends.
		{"https://evil@shop.example.com", false},
		{"https://shop.example.com?x=1", false},
		{"https://shop.example.com#x", false},
		{"https://shop.example.com/", false},
		{"https:shop.example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			got := call(t, http.MethodOptions, tokenURL(ts, storeA), nil,
				"Origin", tt.origin,
				"Access-Control-Request-Method", "POST",
				"Access-Control-Request-Headers", "content-type")
			acao := got.header.Get("Access-Control-Allow-Origin")
			if !tt.allow {
				assert.Empty(t, acao, "Access-Control-Allow-Origin for a foreign origin; status %d", got.status)
				return
			}
			assert.True(t, got.status == http.StatusOK || got.status == http.StatusNoContent, "preflight status %d", got.status)
			assert.Equal(t, tt.origin, acao, "Access-Control-Allow-Origin")
			assert.Contains(t, got.header.Get("Access-Control-Allow-Methods"), "POST")
			assert.Contains(t, strings.ToLower(got.header.Get("Access-Control-Allow-Headers")), "content-type")

			// The actual request from that origin carries the header too.
			r := mustRegister(t, ts, storeA, keyA)
			post := postForm(t, tokenURL(ts, storeA), r.form(), "Origin", tt.origin)
			requireToken(t, post)
			assert.Equal(t, tt.origin, post.header.Get("Access-Control-Allow-Origin"))
		})
	}
	t.Run("other store's domains", func(t *testing.T) {
		got := call(t, http.MethodOptions, tokenURL(ts, storeB), nil,
			"Origin", "https://a.acme.example.com", "Access-Control-Request-Method", "POST")
		assert.Empty(t, got.header.Get("Access-Control-Allow-Origin"))
	})
}

func TestMe(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))

	t.Run("bearer token", func(t *testing.T) {
		got := me(t, ts, storeA, tok.AccessToken)
		require.Equal(t, http.StatusOK, got.status, "body %s", got.body)
		requireJSON(t, got)
		var body struct {
			Data struct {
				Player map[string]any `json:"player"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(got.body, &body))
		assert.Equal(t, wantPlayer, body.Data.Player)
	})
	// RFC 6750 §3.1: a request without credentials gets a challenge
	// without an error code.
	const invalid, bare = `Bearer error="invalid_token"`, "Bearer"
	tests := []struct {
		name, store, auth, cookie string
		wantStatus                int
		wantCode, wantChallenge   string
	}{
		{"no Authorization", storeA, "", "", 401, "unauthorized", bare},
		{"unknown token", storeA, "Bearer " + newAuthCode(t), "", 401, "unauthorized", invalid},
		{"empty token", storeA, "Bearer ", "", 401, "unauthorized", invalid},
		{"Basic scheme", storeA, "Basic " + tok.AccessToken, "", 401, "unauthorized", invalid},
		{"unknown session cookie", storeA, "", newAuthCode(t), 401, "unauthorized", invalid},
		{"token of store A at store B", storeB, "Bearer " + tok.AccessToken, "", 401, "unauthorized", invalid},
		{"unknown store", storeNone, "Bearer " + tok.AccessToken, "", 404, "store_not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.auth != "" {
				headers = []string{"Authorization", tt.auth}
			}
			if tt.cookie != "" {
				headers = append(headers, "Cookie", sessionCookie+"="+tt.cookie)
			}
			got := call(t, http.MethodGet, meURL(ts, tt.store), nil, headers...)
			requireAPIError(t, got, tt.wantStatus, tt.wantCode)
			assert.Equal(t, tt.wantChallenge, got.header.Get("WWW-Authenticate"), "WWW-Authenticate")
		})
	}
}

func TestMeSessionExpires(t *testing.T) {
	_, ts := startService(t, cfgOpts{sessionTTL: "1ns"})
	r := mustRegister(t, ts, storeA, keyA)
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
	requireAPIError(t, me(t, ts, storeA, tok.AccessToken), http.StatusUnauthorized, "unauthorized")
}

func TestOperations(t *testing.T) {
	a, ts := startService(t, cfgOpts{})

	t.Run("healthz", func(t *testing.T) {
		got := call(t, http.MethodGet, ts.URL+"/healthz", nil)
		assert.Equal(t, http.StatusOK, got.status)
	})
	t.Run("readyz before ready", func(t *testing.T) {
		got := call(t, http.MethodGet, ts.URL+"/readyz", nil)
		requireAPIError(t, got, http.StatusServiceUnavailable, "unavailable")
		assert.NotEmpty(t, got.header.Get("Retry-After"), "Retry-After")
	})
	a.srv.ready.Store(true)
	t.Run("readyz when ready", func(t *testing.T) {
		got := call(t, http.MethodGet, ts.URL+"/readyz", nil)
		assert.Equal(t, http.StatusOK, got.status, "body %s", got.body)
		got = call(t, http.MethodGet, ts.URL+"/healthz", nil)
		assert.Equal(t, http.StatusOK, got.status)
	})

	notFound := []string{
		"/",
		"/nope",
		"/stores",
		"/stores/" + storeA,
		"/stores/" + storeA + "/auth",
		"/stores/" + storeA + "/auth/unknown",
		"/stores/" + storeA + "/auth/me/extra",
		"/.well-known/unknown",
	}
	for _, p := range notFound {
		t.Run("GET "+p, func(t *testing.T) {
			requireAPIError(t, call(t, http.MethodGet, ts.URL+p, nil), http.StatusNotFound, "not_found")
		})
	}
	// Paths not in their clean form, which the mux alone would redirect.
	unclean := []struct{ method, path string }{
		{http.MethodPost, "/stores//auth/auth-code"},
		{http.MethodPost, "/stores/" + storeA + "//auth/auth-code"},
		{http.MethodGet, "/stores/" + storeA + "/auth/../auth/me"},
		{http.MethodGet, "/stores/" + storeA + "/./auth/me"},
		{http.MethodGet, "//healthz"},
	}
	for _, tt := range unclean {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err := http.DefaultTransport.RoundTrip(req) // no redirect followed
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			requireAPIError(t, response{status: resp.StatusCode, header: resp.Header, body: body}, http.StatusNotFound, "not_found")
		})
	}
	// Escaped dots and slashes are part of a name, to the mux as here: the
	// store is looked for, and not found.
	for _, p := range []string{"/stores/%2E%2E/auth/me", "/stores/x%2F/auth/me"} {
		t.Run("GET "+p, func(t *testing.T) {
			requireAPIError(t, call(t, http.MethodGet, ts.URL+p, nil), http.StatusNotFound, "store_not_found")
		})
	}

	methods := []struct {
		method, path string
		allow        []string
	}{
		{http.MethodGet, "/stores/" + storeA + "/auth/auth-code", []string{"POST"}},
		{http.MethodPut, "/stores/" + storeA + "/auth/auth-code", []string{"POST"}},
		{http.MethodGet, "/stores/" + storeA + "/auth/token", []string{"POST", "OPTIONS"}},
		{http.MethodPost, "/stores/" + storeA + "/auth/me", []string{"GET"}},
		{http.MethodDelete, "/healthz", []string{"GET"}},
		{http.MethodPost, "/readyz", []string{"GET"}},
		{http.MethodPost, "/.well-known/assetlinks.json", []string{"GET"}},
	}
	for _, tt := range methods {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			got := call(t, tt.method, ts.URL+tt.path, strings.NewReader(""))
			requireAPIError(t, got, http.StatusMethodNotAllowed, "method_not_allowed")
			var allow []string
			for _, m := range strings.Split(got.header.Get("Allow"), ",") {
				allow = append(allow, strings.TrimSpace(m))
			}
			for _, m := range tt.allow {
				assert.Contains(t, allow, m, "Allow: %q", got.header.Get("Allow"))
			}
			assert.NotContains(t, allow, tt.method, "Allow: %q", got.header.Get("Allow"))
		})
	}

	t.Run("readyz while shutting down", func(t *testing.T) {
		a.srv.draining.Store(true)
		defer a.srv.draining.Store(false)
		requireAPIError(t, call(t, http.MethodGet, ts.URL+"/readyz", nil), http.StatusServiceUnavailable, "unavailable")
		assert.Equal(t, http.StatusOK, call(t, http.MethodGet, ts.URL+"/healthz", nil).status, "healthz while shutting down")
	})
}

func TestWellKnown(t *testing.T) {
	const apps = `{
    "apple": [{"app_id": "TEAMID.com.example.game", "paths": ["/oauth/authorize"]}],
    "android": [{"package_name": "com.example.game", "sha256_cert_fingerprints": ["AB:CD:EF"]}]
  }`
	_, with := startService(t, cfgOpts{apps: apps})
	_, without := startService(t, cfgOpts{})

	t.Run("apple configured", func(t *testing.T) {
		got := call(t, http.MethodGet, with.URL+"/.well-known/apple-app-site-association", nil)
		require.Equal(t, http.StatusOK, got.status, "status (no redirect)")
		requireJSON(t, got)
		var aasa appleSiteAssociation
		require.NoError(t, json.Unmarshal(got.body, &aasa), "body %s", got.body)
		require.Len(t, aasa.Applinks.Details, 1)
		d := aasa.Applinks.Details[0]
		// Either the classic (appID, paths) or the iOS 13 (appIDs,
		// components) form names the app and its authorize path.
		if d.AppID != "" {
			assert.Equal(t, "TEAMID.com.example.game", d.AppID)
			assert.Equal(t, []string{"/oauth/authorize"}, d.Paths)
		}
		if len(d.AppIDs) > 0 {
			assert.Equal(t, []string{"TEAMID.com.example.game"}, d.AppIDs)
			assert.Equal(t, []map[string]any{{"/": "/oauth/authorize"}}, d.Components)
		}
		assert.True(t, d.AppID != "" || len(d.AppIDs) > 0, "no app id in %s", got.body)
	})
	t.Run("android configured", func(t *testing.T) {
		got := call(t, http.MethodGet, with.URL+"/.well-known/assetlinks.json", nil)
		require.Equal(t, http.StatusOK, got.status, "status (no redirect)")
		requireJSON(t, got)
		var links assetLinks
		require.NoError(t, json.Unmarshal(got.body, &links), "body %s", got.body)
		require.Len(t, links, 1)
		assert.Equal(t, []string{"delegate_permission/common.handle_all_urls"}, links[0].Relation)
		assert.Equal(t, "android_app", links[0].Target.Namespace)
		assert.Equal(t, "com.example.game", links[0].Target.PackageName)
		assert.Equal(t, []string{"AB:CD:EF"}, links[0].Target.Fingerprints)
	})
	for _, p := range []string{"/.well-known/apple-app-site-association", "/.well-known/assetlinks.json"} {
		t.Run(p+" not configured", func(t *testing.T) {
			requireAPIError(t, call(t, http.MethodGet, without.URL+p, nil), http.StatusNotFound, "not_found")
		})
	}
}

// fakeGame plays the game app of spec §4.1: it reads the deep link,
// registers a fresh code for its signed-in player, and sends the browser
// back to the decoded redirect_uri with code and state.
type fakeGame struct {
	svcURL  string
	client  *http.Client // reaches the service
	storeID string       // used when the link has no store_id
	key     string

	mu       sync.Mutex
	lastCode string
}

// postRegistration registers a code with the service at baseURL as a game
// app's backend does, and returns an error unless it answers 200.
func postRegistration(client *http.Client, baseURL, storeID, apiKey string, fields map[string]string) error {
	body, _ := json.Marshal(fields)
	req, err := http.NewRequest(http.MethodPost, baseURL+"/stores/"+storeID+"/auth/auth-code", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("registration failed: %w", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("registration failed: %d %s", resp.StatusCode, msg)
	}
	return nil
}

func (g *fakeGame) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	store := q.Get("store_id")
	if store == "" {
		store = g.storeID
	}
	var b [32]byte
	rand.Read(b[:])
	code := base64.RawURLEncoding.EncodeToString(b[:])
	err := postRegistration(g.client, g.svcURL, store, g.key, map[string]string{
		"auth_code":           code,
		"redirect_uri":        q.Get("redirect_uri"),
		"client_reference_id": "player-42",
		"code_challenge":      q.Get("code_challenge"),
		"state":               q.Get("state"),
		"first_name":          "Ada",
	})
	if err != nil {
		// The game app must not redirect back when registration fails.
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	g.mu.Lock()
	g.lastCode = code
	g.mu.Unlock()
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// flow is the service over TLS (its cookies are Secure) with its
// public_base_url set to itself, and a game app store A links to.
type flow struct {
	app  *app
	svc  *httptest.Server
	base string // public_base_url: svc.URL and the prefix of startFlowAt
	game *httptest.Server
}

func startFlow(t *testing.T) *flow { return startFlowAt(t, "") }

// startFlowAt starts a flow whose service is reached under prefix, as
// behind a proxy that strips it: public_base_url is svc.URL+prefix.
func startFlowAt(t *testing.T, prefix string) *flow {
	t.Helper()
	svc := httptest.NewUnstartedServer(nil)
	game := httptest.NewUnstartedServer(nil)
	base := "https://" + svc.Listener.Addr().String() + prefix
	gameURL := "http://" + game.Listener.Addr().String() + "/oauth/authorize"
	a := newTestApp(t, testConfig(cfgOpts{publicBaseURL: base, gameURL: gameURL}))
	svc.Config.Handler = http.StripPrefix(prefix, a.srv.handler())
	svc.StartTLS()
	t.Cleanup(svc.Close)
	game.Config.Handler = &fakeGame{svcURL: base, client: svc.Client(), storeID: storeA, key: keyA}
	game.Start()
	t.Cleanup(game.Close)
	return &flow{app: a, svc: svc, base: base, game: game}
}

// get fetches u without following redirects, sending cookies.
func (f *flow) get(t *testing.T, u string, cookies ...*http.Cookie) response {
	t.Helper()
	return f.do(t, http.MethodGet, u, cookies...)
}

// do sends a bodiless request as a browser would, redirects not followed.
func (f *flow) do(t *testing.T, method, u string, cookies ...*http.Cookie) response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	require.NoError(t, err)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	c := &http.Client{
		Transport:     f.svc.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return send(t, c, req)
}

func (f *flow) linkURL(store, returnTo string) string {
	u := f.base + "/stores/" + store + "/auth/link"
	if returnTo != "" {
		u += "?return_to=" + url.QueryEscape(returnTo)
	}
	return u
}

// setCookies returns the cookies r sets, leaving out those it deletes.
func setCookies(r response) []*http.Cookie {
	var cs []*http.Cookie
	for _, c := range r.resp.Cookies() {
		if c.MaxAge >= 0 && c.Value != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// startLink opens the link as a browser would, follows it to the game app,
// and returns the cookies the link set and the callback URL the game app
// sends the browser to.
func (f *flow) startLink(t *testing.T, returnTo string) (cookies []*http.Cookie, callback string) {
	t.Helper()
	link := f.get(t, f.linkURL(storeA, returnTo))
	require.Equal(t, http.StatusFound, link.status, "link: %s", link.body)
	cookies = setCookies(link)
	require.NotEmpty(t, cookies, "link sets a cookie")
	for _, c := range cookies {
		require.LessOrEqual(t, len(c.Name)+len(c.Value), 4096, "cookie %s is small enough for browsers", c.Name)
	}
	toGame := link.header.Get("Location")
	require.True(t, strings.HasPrefix(toGame, f.game.URL+"/oauth/authorize?"), "link redirects to %q", toGame)
	back := f.get(t, toGame)
	require.Equal(t, http.StatusFound, back.status, "game app: %s", back.body)
	return cookies, back.header.Get("Location")
}

func TestLink(t *testing.T) {
	f := startFlow(t)
	got := f.get(t, f.linkURL(storeA, "/account"))
	require.Equal(t, http.StatusFound, got.status, "body %s", got.body)

	loc, err := url.Parse(got.header.Get("Location"))
	require.NoError(t, err)
	assert.Equal(t, f.game.URL+"/oauth/authorize", loc.Scheme+"://"+loc.Host+loc.Path, "redirect target")
	q := loc.Query()
	keys := make([]string, 0, len(q))
	for k, v := range q {
		keys = append(keys, k)
		assert.Len(t, v, 1, "values of %s", k)
	}
	assert.ElementsMatch(t, []string{"redirect_uri", "state", "code_challenge", "code_challenge_method", "store_id"}, keys)
	assert.Equal(t, f.svc.URL+"/stores/"+storeA+"/auth/callback", q.Get("redirect_uri"))
	assert.Contains(t, loc.RawQuery, "redirect_uri="+url.QueryEscape(f.svc.URL+"/stores/"+storeA+"/auth/callback"), "redirect_uri percent-encoded")
	assert.NotEmpty(t, q.Get("state"))
	assert.Regexp(t, `^[A-Za-z0-9_-]{43}$`, q.Get("code_challenge"))
	assert.Equal(t, "S256", q.Get("code_challenge_method"))
	assert.Equal(t, storeA, q.Get("store_id"))

	cookies := got.resp.Cookies()
	require.Len(t, cookies, 1, "link sets one cookie")
	c := cookies[0]
	assert.True(t, c.HttpOnly, "HttpOnly")
	assert.True(t, c.Secure, "Secure")
	assert.Equal(t, http.SameSiteLaxMode, c.SameSite, "SameSite")
	assert.Equal(t, "/stores/"+storeA+"/auth/", c.Path, "Path: the callback's directory")

	t.Run("fresh values each time", func(t *testing.T) {
		again := f.get(t, f.linkURL(storeA, "/account"))
		l2, err := url.Parse(again.header.Get("Location"))
		require.NoError(t, err)
		assert.NotEqual(t, q.Get("state"), l2.Query().Get("state"))
		assert.NotEqual(t, q.Get("code_challenge"), l2.Query().Get("code_challenge"))
	})
	t.Run("unknown store", func(t *testing.T) {
		requireAPIError(t, f.get(t, f.linkURL(storeNone, "/")), http.StatusNotFound, "store_not_found")
	})
}

// TestLinkFlowBrowser runs the whole browser flow with a cookie jar that
// follows every redirect, as a browser would: with the service at the
// root of its host, and under a path of public_base_url (behind a proxy
// that strips it), where the link cookie must still reach the callback.
func TestLinkFlowBrowser(t *testing.T) {
	for _, prefix := range []string{"", "/signin"} {
		t.Run("at "+prefix+"/", func(t *testing.T) {
			f := startFlowAt(t, prefix)
			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			var visited []string
			browser := &http.Client{
				Transport: f.svc.Client().Transport,
				Jar:       jar,
				CheckRedirect: func(req *http.Request, via []*http.Request) error {
					visited = append(visited, req.URL.Scheme+"://"+req.URL.Host+req.URL.Path)
					return nil
				},
			}
			req, err := http.NewRequest(http.MethodGet, f.linkURL(storeA, "/account?tab=orders"), nil)
			require.NoError(t, err)
			got := send(t, browser, req)
			// The shop's own /account page is not this service's: 404 there
			// is the end of the flow.
			assert.Equal(t, []string{
				f.game.URL + "/oauth/authorize",
				f.base + "/stores/" + storeA + "/auth/callback",
				f.svc.URL + "/account",
			}, visited, "redirects")
			assert.Equal(t, "/account", got.resp.Request.URL.Path)
			assert.Equal(t, "tab=orders", got.resp.Request.URL.RawQuery)

			// The browser is signed in.
			req, err = http.NewRequest(http.MethodGet, f.base+"/stores/"+storeA+"/auth/me", nil)
			require.NoError(t, err)
			who := send(t, browser, req)
			require.Equal(t, http.StatusOK, who.status, "me: %s", who.body)
			assert.Contains(t, string(who.body), `"client_reference_id":"player-42"`)
		})
	}
}

func TestCallback(t *testing.T) {
	f := startFlow(t)

	t.Run("happy path and replay", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/path?x=1")
		require.True(t, strings.HasPrefix(callback, f.svc.URL+"/stores/"+storeA+"/auth/callback?"), "game app redirects to %q", callback)
		got := f.get(t, callback, cookies...)
		require.Equal(t, http.StatusFound, got.status, "callback: %s", got.body)
		assert.Equal(t, "/path?x=1", got.header.Get("Location"))
		session := setCookies(got)
		require.NotEmpty(t, session, "callback sets a session cookie")
		for _, c := range session {
			assert.True(t, c.HttpOnly, "session cookie %s HttpOnly", c.Name)
			assert.True(t, c.Secure, "session cookie %s Secure", c.Name)
		}
		who := f.get(t, f.svc.URL+"/stores/"+storeA+"/auth/me", session...)
		require.Equal(t, http.StatusOK, who.status, "me with the session: %s", who.body)

		// The same callback again, link cookie and all: the code is used.
		replay := f.get(t, callback, cookies...)
		requireCallbackFailed(t, replay, "could not be used")
		// A replayed code revokes what it issued (API.md §4.2).
		requireAPIError(t, f.get(t, f.svc.URL+"/stores/"+storeA+"/auth/me", session...), http.StatusUnauthorized, "unauthorized")
	})
	t.Run("replay without the link cookie", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		require.Equal(t, http.StatusFound, f.get(t, callback, cookies...).status)
		requireCallbackFailed(t, f.get(t, callback), "not started in this browser")
	})
	t.Run("bad state", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		u, err := url.Parse(callback)
		require.NoError(t, err)
		q := u.Query()
		q.Set("state", q.Get("state")+"x")
		u.RawQuery = q.Encode()
		requireCallbackFailed(t, f.get(t, u.String(), cookies...), "does not match")
	})
	t.Run("state of another link", func(t *testing.T) {
		cookies, _ := f.startLink(t, "/")
		_, other := f.startLink(t, "/")
		requireCallbackFailed(t, f.get(t, other, cookies...), "does not match")
	})
	t.Run("no link cookie", func(t *testing.T) {
		_, callback := f.startLink(t, "/")
		requireCallbackFailed(t, f.get(t, callback), "not started in this browser")
	})
	t.Run("tampered link cookie", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		for _, c := range cookies {
			c.Value = "x" + c.Value
		}
		requireCallbackFailed(t, f.get(t, callback, cookies...), "could not be read")
	})
	t.Run("link cookie of another store", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		other := strings.Replace(callback, "/stores/"+storeA+"/", "/stores/"+storeB+"/", 1)
		requireCallbackFailed(t, f.get(t, other, cookies...), "started in another store")
	})
	t.Run("no code", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		u, err := url.Parse(callback)
		require.NoError(t, err)
		q := u.Query()
		q.Del("code")
		u.RawQuery = q.Encode()
		requireCallbackFailed(t, f.get(t, u.String(), cookies...), "returned no code")
	})
	t.Run("error from the game app", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		u, err := url.Parse(callback)
		require.NoError(t, err)
		q := u.Query()
		q.Del("code")
		q.Set("error", "access_denied")
		u.RawQuery = q.Encode()
		got := f.get(t, u.String(), cookies...)
		requireCallbackFailed(t, got, "You cancelled the sign-in in the game.")
		assert.True(t, clearsLinkCookie(got), "the attempt is over: its cookie is cleared")
	})
	t.Run("tampered cookie cleared", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		for _, c := range cookies {
			c.Value = "x" + c.Value
		}
		assert.True(t, clearsLinkCookie(f.get(t, callback, cookies...)), "a cookie that cannot complete a sign-in is cleared")
	})
	// Any page can send the browser to the callback, cookie and all
	// (SameSite=Lax): without the attempt's state, that must not end it.
	for _, stray := range []struct{ name, query string }{
		{"stray: no query", ""},
		{"stray: another state", "?state=x&code=y"},
		{"stray: an error without the state", "?error=access_denied"},
	} {
		t.Run(stray.name, func(t *testing.T) {
			cookies, callback := f.startLink(t, "/")
			got := f.get(t, f.svc.URL+"/stores/"+storeA+"/auth/callback"+stray.query, cookies...)
			requireCallbackFailed(t, got, "does not match")
			assert.False(t, clearsLinkCookie(got), "a stray callback clears the link cookie")
			assert.Equal(t, http.StatusFound, f.get(t, callback, cookies...).status, "the real callback after it")
		})
	}
	// The GET routes take HEAD too; here HEAD would redeem the code, or
	// replace the link cookie of the sign-in under way.
	t.Run("HEAD", func(t *testing.T) {
		cookies, callback := f.startLink(t, "/")
		for _, u := range []string{callback, f.linkURL(storeA, "/")} {
			got := f.do(t, http.MethodHead, u, cookies...)
			assert.Equal(t, http.StatusMethodNotAllowed, got.status, "HEAD %s", u)
			assert.Equal(t, "GET", got.header.Get("Allow"), "HEAD %s: Allow", u)
			assert.Empty(t, got.resp.Cookies(), "HEAD %s: Set-Cookie", u)
		}
		assert.Equal(t, http.StatusFound, f.get(t, callback, cookies...).status, "the callback after HEAD")
	})
}

// clearsLinkCookie reports whether r deletes the link cookie.
func clearsLinkCookie(r response) bool {
	for _, c := range r.resp.Cookies() {
		if c.Name == linkCookie && c.MaxAge < 0 {
			return true
		}
	}
	return false
}

// TestLinkCookieVerify checks why verify refuses a link cookie's value, as
// the callback's page then says: a changed or foreign value is not called
// expired, and an expired one is.
func TestLinkCookieVerify(t *testing.T) {
	a, _ := startService(t, cfgOpts{})
	other, _ := startService(t, cfgOpts{}) // another cookie key
	now := time.Now()
	v := a.srv.sign(linkState{StoreID: storeA, State: "s", Expires: now.Add(time.Minute).Unix()})
	payload, sig, _ := strings.Cut(v, ".")
	tests := []struct {
		name, value string
		at          time.Time
		want        string
	}{
		{"valid", v, now, ""},
		{"expired", v, now.Add(time.Minute), linkExpired},
		{"payload changed", "x" + v, now, linkForged},
		{"signature changed", payload + "." + strings.ToUpper(sig), now, linkForged},
		{"no signature", payload, now, linkForged},
		{"signed with another key", other.srv.sign(linkState{StoreID: storeA, Expires: now.Add(time.Minute).Unix()}), now, linkForged},
	}
	for _, tt := range tests {
		ls, why := a.srv.verify(tt.value, tt.at)
		if why != tt.want {
			t.Errorf("%s: verify = %q; want %q", tt.name, why, tt.want)
		}
		if why == "" && ls.State != "s" {
			t.Errorf("%s: verify state = %q; want %q", tt.name, ls.State, "s")
		}
	}
}

// requireCallbackFailed checks the failure page of API.md §4.4: 400, HTML
// saying what went wrong (why, a part of it), and no session.
func requireCallbackFailed(t *testing.T, r response, why string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, r.status, "callback; body %s", r.body)
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	assert.Equal(t, "text/html", mt, "Content-Type")
	assert.Contains(t, string(r.body), html.EscapeString(why), "the page says what went wrong")
	assert.Empty(t, setCookies(r), "a failed callback sets no cookie")
}

func TestCallbackReturnTo(t *testing.T) {
	f := startFlow(t)
	tests := []struct {
		returnTo, want string
		name           string // when returnTo is too long for one
	}{
		{"/path?x=1", "/path?x=1", ""},
		{"/", "/", ""},
		{"/a/b", "/a/b", ""},
		{"", "/", ""},
		{"https://evil.com", "/", ""},
		{"https://evil.com/path", "/", ""},
		{"//evil.com", "/", ""},
		{"///evil.com", "/", ""},
		{`/\evil.com`, "/", ""},
		{`\\evil.com`, "/", ""},
		{"/\t/evil.com", "/", ""},
		{"javascript:alert(1)", "/", ""},
		{"evil.com", "/", ""},
		{"/" + strings.Repeat("a", 2000), "/" + strings.Repeat("a", 2000), "2000 bytes"},
		{"/" + strings.Repeat("a", 4000), "/", "4000 bytes: no room in the cookie"},
		{"/" + strings.Repeat("<", 1000), "/", "1000 bytes, 6000 escaped in the cookie"},
		{"/x?q=" + strings.Repeat("%E2%82%AC", 300), "/x?q=" + strings.Repeat("%E2%82%AC", 300), "percent-encoded"},
	}
	for _, tt := range tests {
		name := tt.name
		if name == "" {
			name = tt.returnTo
		}
		t.Run(name, func(t *testing.T) {
			cookies, callback := f.startLink(t, tt.returnTo)
			got := f.get(t, callback, cookies...)
			require.Equal(t, http.StatusFound, got.status, "callback: %s", got.body)
			assert.Equal(t, tt.want, got.header.Get("Location"), "return_to %q", name)
		})
	}
}

// TestOAuth2Client is the webshop side done by golang.org/x/oauth2, an
// ordinary OAuth client library, against the token endpoint.
func TestOAuth2Client(t *testing.T) {
	_, svc := startService(t, cfgOpts{})
	game := httptest.NewServer(&fakeGame{svcURL: svc.URL, client: svc.Client(), storeID: storeA, key: keyA})
	t.Cleanup(game.Close)

	conf := &oauth2.Config{
		ClientID:    "webshop",
		RedirectURL: shopCB,
		Endpoint: oauth2.Endpoint{
			AuthURL:   game.URL + "/oauth/authorize",
			TokenURL:  tokenURL(svc, storeA),
			AuthStyle: oauth2.AuthStyleInParams,
		},
	}
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, svc.Client())

	// authorize sends the browser to the game app and returns the code it
	// comes back with.
	authorize := func(t *testing.T, verifier string) string {
		t.Helper()
		state := oauth2.GenerateVerifier()
		got := call(t, http.MethodGet, conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier)), nil)
		require.Equal(t, http.StatusFound, got.status, "game app: %s", got.body)
		back, err := url.Parse(got.header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, shopCB, back.Scheme+"://"+back.Host+back.Path)
		require.Equal(t, state, back.Query().Get("state"), "state passed through")
		return back.Query().Get("code")
	}

	t.Run("exchange", func(t *testing.T) {
		verifier := oauth2.GenerateVerifier()
		code := authorize(t, verifier)
		before := time.Now()
		tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
		require.NoError(t, err)
		assert.NotEmpty(t, tok.AccessToken)
		assert.Equal(t, "Bearer", tok.Type())
		assert.WithinDuration(t, before.Add(24*time.Hour), tok.Expiry, time.Minute)
		player, ok := tok.Extra("player").(map[string]any)
		require.True(t, ok, "Extra(player) = %#v", tok.Extra("player"))
		assert.Equal(t, "player-42", player["client_reference_id"])
		assert.Equal(t, "Ada", player["first_name"])

		// The token works at /me through oauth2's own transport.
		resp, err := conf.Client(ctx, tok).Get(meURL(svc, storeA))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "me: %s", b)
		assert.Contains(t, string(b), `"client_reference_id":"player-42"`)

		// The code does not work twice.
		_, err = conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
		var re *oauth2.RetrieveError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "invalid_grant", re.ErrorCode)
	})
	t.Run("wrong verifier", func(t *testing.T) {
		code := authorize(t, oauth2.GenerateVerifier())
		_, err := conf.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier()))
		var re *oauth2.RetrieveError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, "invalid_grant", re.ErrorCode)
		assert.NotEmpty(t, re.ErrorDescription)
	})
	t.Run("basic auth style", func(t *testing.T) {
		// A client that sends client_id in an Authorization header instead
		// is a public client all the same.
		c := *conf
		c.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
		verifier := oauth2.GenerateVerifier()
		tok, err := c.Exchange(ctx, authorize(t, verifier), oauth2.VerifierOption(verifier))
		require.NoError(t, err)
		assert.NotEmpty(t, tok.AccessToken)
	})
}

// TestReviewedEdges covers answers a review against API.md corrected.
func TestReviewedEdges(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))

	for _, tt := range []struct{ name, header string }{
		{"bearer scheme is case-insensitive", "bearer " + tok.AccessToken},
		{"more than one space after the scheme", "Bearer   " + tok.AccessToken}, // RFC 6750: 1*SP
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, ts.URL+"/stores/"+storeA+"/auth/me", nil)
			req.Header.Set("Authorization", tt.header)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		})
	}
	t.Run("token body over 64 KiB is a 400 invalid_request", func(t *testing.T) {
		v := r.form()
		v.Set("pad", strings.Repeat("x", 70<<10))
		requireTokenError(t, postForm(t, tokenURL(ts, storeA), v), "invalid_request")
	})
	t.Run("preflight for an unknown store is 404", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodOptions, ts.URL+"/stores/00000000-0000-4000-8000-000000000000/auth/token", nil)
		req.Header.Set("Origin", "https://shop.example.com")
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

// TestConfigWarnings checks the start-up warnings about a store whose own
// link flow would send the game app a callback URL that registering it
// refuses: the browser flow could never complete.
func TestConfigWarnings(t *testing.T) {
	tests := []struct {
		name string
		o    cfgOpts
		want []string // a warning containing each, in order; none for nil
	}{
		{"https base on every store's domains", cfgOpts{}, nil},
		{"base on store A's domains only", cfgOpts{publicBaseURL: "https://x.acme.example.com"},
			[]string{"store " + storeB + ": its link flow cannot complete: registering its callback URL https://x.acme.example.com/stores/" + storeB + "/auth/callback answers 400 redirect_uri_not_allowed; add x.acme.example.com to its redirect_domains"}},
		{"http base", cfgOpts{publicBaseURL: "http://shop.example.com"},
			[]string{"store " + storeA + ": its link flow cannot complete: registering its callback URL http://shop.example.com/stores/" + storeA + "/auth/callback answers 422", "store " + storeB + ": "}},
		{"http loopback base with insecure URLs", cfgOpts{publicBaseURL: "http://127.0.0.1:8080", insecure: true},
			[]string{"allow_insecure_urls is on", "store " + storeB + ": its link flow cannot complete: registering its callback URL http://127.0.0.1:8080/stores/" + storeB + "/auth/callback answers 400 redirect_uri_not_allowed; add 127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newTestApp(t, testConfig(tt.o)).srv.configWarnings()
			require.Len(t, got, len(tt.want), "configWarnings() = %q", got)
			for i, w := range tt.want {
				assert.Contains(t, got[i], w, "warning %d", i)
			}
		})
	}
}
