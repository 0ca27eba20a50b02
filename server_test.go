package main

import (
	"deeplink/internal/serving"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// registerMux routes only registerRoute, recording the store_id it sees.
func registerMux(id *string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(registerRoute, func(_ http.ResponseWriter, r *http.Request) { *id = r.PathValue("store_id") })
	return mux
}

// serviceMux is the service's own mux, every route included.
var serviceMux = sync.OnceValue(func() *http.ServeMux {
	cfg, err := ParseConfig(demoConfig)
	if err != nil {
		panic(err)
	}
	s := newServer(cfg, nil, nil, slog.New(slog.DiscardHandler))
	s.demo = true
	return s.routes()
})

// checkRegisterStore fails when registerStore takes a request the
// service's mux would route elsewhere, or read another store_id from.
func checkRegisterStore(t *testing.T, method, target string) (string, bool) {
	t.Helper()
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return "", false
	}
	r := &http.Request{Method: method, URL: u, RequestURI: target, Host: "example.com", Header: http.Header{}}
	id, ok := registerStore(r)
	if !ok {
		return "", false
	}
	var muxID string
	registerMux(&muxID).ServeHTTP(httptest.NewRecorder(), r)
	if _, pattern := serviceMux().Handler(r); pattern != registerRoute || muxID != id {
		t.Fatalf("registerStore(%s %q) = %q, true; the mux routes it to %q with store_id %q", method, target, id, pattern, muxID)
	}
	return id, ok
}

func TestRegisterStore(t *testing.T) {
	tests := []struct {
		method, target string
		id             string // "" when the mux must decide
	}{
		{"POST", "/stores/7c9e6679-7425-40de-944b-e07fc1f90ae7/auth/auth-code", "7c9e6679-7425-40de-944b-e07fc1f90ae7"},
		{"POST", "/stores/s/auth/auth-code?x=1", "s"},
		{"POST", "/stores/a%25b/auth/auth-code", "a%b"},
		{"GET", "/stores/s/auth/auth-code", ""},
		{"post", "/stores/s/auth/auth-code", ""},
		{"POST", "/stores//auth/auth-code", ""},
		{"POST", "/stores/./auth/auth-code", ""},
		{"POST", "/stores/../auth/auth-code", ""},
		{"POST", "/stores/a/b/auth/auth-code", ""},
		{"POST", "/stores/a%2Fb/auth/auth-code", ""},
		{"POST", "/stores/%73/auth/auth-code", ""},
		{"POST", "/stores/s/auth/auth-code/", ""},
		{"POST", "/stores/s/x/../auth/auth-code", ""},
		{"POST", "//stores/s/auth/auth-code", ""},
		{"POST", "/stores/s/auth/token", ""},
	}
	for _, tt := range tests {
		id, ok := checkRegisterStore(t, tt.method, tt.target)
		if id != tt.id || ok != (tt.id != "") {
			t.Errorf("registerStore(%s %q) = %q, %v; want %q", tt.method, tt.target, id, ok, tt.id)
		}
	}
}

// FuzzRegisterStore checks, over any method and request target, that the
// fast path never takes a request the mux would route elsewhere or read
// another store_id from. Seeds: testdata/fuzz/FuzzRegisterStore.
func FuzzRegisterStore(f *testing.F) {
	f.Add("POST", "/stores/s/auth/auth-code")
	f.Fuzz(func(t *testing.T, method, target string) {
		checkRegisterStore(t, method, target)
	})
}

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

// TestLoggedPathIsCut: anyone can send a path of nearly 64 KiB; its log
// line shows the first serving.MaxLoggedPath bytes and says how long it was.
func TestLoggedPathIsCut(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	var logs lockedBuffer
	a.srv.log = slog.New(newLineHandler(&logs, slog.LevelInfo))
	for _, tt := range []struct {
		path, want string
	}{
		{"/" + strings.Repeat("a", 99), "/" + strings.Repeat("a", 99)},
		{"/" + strings.Repeat("b", serving.MaxLoggedPath-1), "/" + strings.Repeat("b", serving.MaxLoggedPath-1)},
		{"/" + strings.Repeat("c", 5000), "/" + strings.Repeat("c", serving.MaxLoggedPath-1) + "…(5001 bytes)"},
	} {
		resp, err := http.Get(ts.URL + tt.path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		var line struct{ Path string }
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line))
		if line.Path != tt.want {
			t.Errorf("logged path of a %d-byte path = %.40q… (%d bytes); want %.40q… (%d bytes)", len(tt.path), line.Path, len(line.Path), tt.want, len(tt.want))
		}
	}
}
