package main

import (
	"deeplink/internal/serving"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex // guards the field below
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// TestLoggedPath: a request's log line shows the route's path with the
// store id only when it is a configured store, never a segment of the
// path that is neither the route's own nor such an id: a client that puts
// its key where the store id goes (or anything else there) does not have
// it logged. Long paths are cut at serving.MaxLoggedPath bytes.
func TestLoggedPath(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	var logs lockedBuffer
	a.srv.log = newLogger(&logs)
	const secret = "ak_live_swapped_with_the_store_id"
	long := "/stores/" + strings.Repeat("x/", 2000)
	for _, tt := range []struct {
		method, path string
		status       int
		want         string
	}{
		{"GET", "/stores/" + secret + "/webhooks", 404, "/stores/{store_id}/webhooks"},
		{"POST", "/stores/" + secret + "/auth/auth-code", 404, "/stores/{store_id}/auth/auth-code"},
		{"GET", "/stores/" + storeA + "/webhooks/" + secret, 401, "/stores/" + storeA + "/webhooks/{endpoint_id}"},
		{"GET", "/stores/" + storeA + "/webhooks", 401, "/stores/" + storeA + "/webhooks"},
		{"GET", "/stores/" + strings.ToUpper(storeA) + "/webhooks", 401, "/stores/" + strings.ToUpper(storeA) + "/webhooks"},
		{"PUT", "/stores/" + secret + "/auth/auth-code", 405, "/stores/{store_id}/auth/auth-code"},
		{"PUT", "/stores/" + storeA + "/auth/auth-code", 405, "/stores/" + storeA + "/auth/auth-code"},
		{"GET", "/stores/" + secret + "/no/such/" + secret, 404, "/stores/…/…/…/…"},
		{"GET", "/stores/" + storeA + "/auth/x%3Fcode=" + secret, 404, "/stores/" + storeA + "/auth/…"},
		{"GET", "/" + secret, 404, "/…"},
		{"GET", "/stores/" + storeA + "/auth/link?code=" + secret, 302, "/stores/" + storeA + "/auth/link"},
		{"GET", "/", 404, "/"},
		{"GET", "/healthz", 200, "/healthz"},
		{"GET", long, 404, serving.CutPath(strings.ReplaceAll(long, "x", "…"))},
	} {
		got := call(t, tt.method, ts.URL+tt.path, nil)
		require.Equal(t, tt.status, got.status, "%s %s: %s", tt.method, tt.path, got.body)
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		last := lines[len(lines)-1]
		var line struct{ Path string }
		require.NoError(t, json.Unmarshal([]byte(last), &line))
		if line.Path != tt.want {
			t.Errorf("logged path of %s %.80q = %.80q; want %.80q", tt.method, tt.path, line.Path, tt.want)
		}
		if strings.Contains(last, "ak_live_") {
			t.Errorf("log line of %s %.80q carries the key: %s", tt.method, tt.path, last)
		}
	}
}

// TestRequestID: every response carries X-Request-Id, the request's own
// when it is 1 to 128 visible ASCII characters and a new random one
// otherwise, on every route and answer (errors, 404, 405, /healthz,
// /metrics); the request's log line carries the same id as request_id.
func TestRequestID(t *testing.T) {
	a := newTestApp(t, testConfig(cfgOpts{}))
	var logs lockedBuffer
	a.srv.log = newLogger(&logs)
	h := a.srv.handler()

	visible := make([]byte, 0, 0x7f-0x21)
	for c := byte(0x21); c <= 0x7e; c++ {
		visible = append(visible, c)
	}
	ids := []struct {
		name, sent string
		keep       bool
	}{
		{"one character", "x", true},
		{"a uuid", "3f2504e0-4f89-41d3-9a0c-0305e82c3301", true},
		{"every visible character", string(visible), true},
		{"128 characters", strings.Repeat("a", 128), true},
		{"129 characters", strings.Repeat("a", 129), false},
		{"none", "", false},
		{"a space", "two words", false},
		{"a tab", "a\tb", false},
		{"DEL", "a\x7fb", false},
		{"a control character", "a\x01b", false},
		{"not ASCII", "café", false},
	}
	reg := func() string {
		return string(mustJSON(t, registration(newAuthCode(t), rfc7636Challenge)))
	}
	routes := []struct {
		method, path string
		body         func() string // nil: none
		status       int
	}{
		{http.MethodPost, "/stores/" + storeA + "/auth/auth-code", reg, http.StatusOK},
		{http.MethodPost, "/stores/" + storeA + "/auth/auth-code", func() string { return "{" }, http.StatusBadRequest},
		{http.MethodPost, "/stores/" + storeA + "/auth/token", func() string { return "grant_type=nonsense" }, http.StatusBadRequest},
		{http.MethodGet, "/stores/" + storeA + "/auth/auth-code", nil, http.StatusMethodNotAllowed},
		{http.MethodGet, "/no/such/thing", nil, http.StatusNotFound},
		{http.MethodPost, "/stores//auth/auth-code", nil, http.StatusNotFound},
		{http.MethodGet, "/healthz", nil, http.StatusOK},
		{http.MethodGet, "/metrics", nil, http.StatusOK},
	}
	made := map[string]string{} // new ids, to the request that got each
	for _, id := range ids {
		for _, rt := range routes {
			what := fmt.Sprintf("%s %s with %s", rt.method, rt.path, id.name)
			var body io.Reader
			if rt.body != nil {
				body = strings.NewReader(rt.body())
			}
			r := httptest.NewRequest(rt.method, rt.path, body)
			r.Header.Set("X-API-Key", keyA)
			if rt.method == http.MethodPost && strings.HasSuffix(rt.path, "/token") {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			} else if rt.method == http.MethodPost {
				r.Header.Set("Content-Type", "application/json")
			}
			if id.sent != "" {
				r.Header["X-Request-Id"] = []string{id.sent} // as sent, not as a client would clean it
			}
			before := len(logs.String())
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != rt.status {
				t.Fatalf("%s: status %d; want %d (body %s)", what, w.Code, rt.status, w.Body)
			}
			got := w.Header().Get("X-Request-Id")
			switch {
			case id.keep && got != id.sent:
				t.Errorf("%s: X-Request-Id = %q; want the request's own", what, got)
			case !id.keep && got == id.sent:
				t.Errorf("%s: X-Request-Id = %q; want a new one", what, got)
			case !id.keep:
				if !validID(got) {
					t.Errorf("%s: new X-Request-Id %q; want 1-128 visible ASCII characters", what, got)
				}
				if other, ok := made[got]; ok {
					t.Errorf("%s: new X-Request-Id %q, the same as %s's", what, got, other)
				}
				made[got] = what
			}
			lines := strings.Split(strings.TrimSpace(logs.String()[before:]), "\n")
			if len(lines) != 1 {
				t.Fatalf("%s: %d log lines; want 1: %q", what, len(lines), lines)
			}
			var line struct {
				Msg       string `json:"msg"`
				Status    int    `json:"status"`
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
				t.Fatalf("%s: log line %s: %v", what, lines[0], err)
			}
			if line.Msg != "request" || line.Status != rt.status || line.RequestID != got {
				t.Errorf("%s: log line %s; want msg request, status %d, request_id %q", what, lines[0], rt.status, got)
			}
		}
	}
}

// validID reports whether id is 1 to 128 visible ASCII characters.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}
