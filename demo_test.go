package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDemoFlow walks the demo as the README tells a newcomer to, with a
// browser's cookie jar: "Link to game" on the home page goes through the
// stand-in game app and back to the home page signed in, and /auth/me
// then answers the demo player.
func TestDemoFlow(t *testing.T) {
	var h http.Handler
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	defer ts.Close()
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatalf("LoadConfig(\"\") = %v; want the demo configuration", err)
	}
	cfg.DataDir = t.TempDir()
	cfg.PublicBaseURL = ts.URL // as run does with the address it listens on
	cfg.Stores[0].GameAuthorizeURL = ts.URL + "/demo/game/authorize"
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatalf("newApp(demo) = %v", err)
	}
	defer a.Close()
	a.srv.ready.Store(true)
	h = a.srv.handler()

	browser := ts.Client()
	browser.Jar, _ = cookiejar.New(nil)
	get := func(path string) (int, string, string) {
		t.Helper()
		resp, err := browser.Get(ts.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Request.URL.Path, string(b)
	}
	st := cfg.Stores[0]
	for _, tt := range []struct {
		path             string
		status           int
		endsAt, contains string
	}{
		{"/stores/" + st.ID + "/auth/me", http.StatusUnauthorized, "/stores/" + st.ID + "/auth/me", `"code":"unauthorized"`},
		{"/", http.StatusOK, "/", `href="/stores/` + st.ID + `/auth/link?return_to=/">Link to game</a>`},
		{"/stores/" + st.ID + "/auth/link?return_to=/", http.StatusOK, "/", "<h1>Demo webshop of "},
		{"/stores/" + st.ID + "/auth/me", http.StatusOK, "/stores/" + st.ID + "/auth/me", `"client_reference_id":"demo-player-`},
	} {
		status, endsAt, body := get(tt.path)
		if status != tt.status || endsAt != tt.endsAt || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s = %d at %s, body %q; want %d at %s containing %q", tt.path, status, endsAt, body, tt.status, tt.endsAt, tt.contains)
		}
	}
}
