package main

import (
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
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
		{"/", http.StatusOK, "/", `<script src="/stores/` + st.ID + `/auth/button.js" async></script>`},
		{"/stores/" + st.ID + "/auth/config", http.StatusOK, "/stores/" + st.ID + "/auth/config", `"link_url":"` + ts.URL + "/stores/" + st.ID + `/auth/link"`},
		{"/stores/" + st.ID + "/auth/link?return_to=/cart", http.StatusOK, "/demo/game/authorize", "Continue as Ada?"},
	} {
		status, endsAt, body := get(tt.path)
		if status != tt.status || endsAt != tt.endsAt || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s = %d at %s, body %q; want %d at %s containing %q", tt.path, status, endsAt, body, tt.status, tt.endsAt, tt.contains)
		}
	}
	// Continue, as the game app's page posts it.
	_, _, page := get("/stores/" + st.ID + "/auth/link?return_to=/cart")
	form := url.Values{}
	for _, m := range regexp.MustCompile(`name="([a-z_]+)" value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	resp, err := browser.PostForm(ts.URL+"/demo/game/authorize", form)
	if err != nil {
		t.Fatalf("Continue: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/cart" || !strings.Contains(string(b), "Signed in as Ada Lovelace") {
		t.Errorf("Continue = %d at %s, body %q; want the cart, signed in as Ada Lovelace", resp.StatusCode, resp.Request.URL.Path, b)
	}
	if status, _, body := get("/stores/" + st.ID + "/auth/me"); status != http.StatusOK || !strings.Contains(body, `"client_reference_id":"demo-player-`) {
		t.Errorf("GET /auth/me after the sign-in = %d %q; want 200 with the demo player", status, body)
	}
}

// TestDemoGameCancel: the game app's Cancel goes back to the webshop only
// on the store's domains; any other redirect_uri gets the demo's home.
func TestDemoGameCancel(t *testing.T) {
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h := a.srv.handler()
	st := cfg.Stores[0]
	for _, tc := range []struct{ redirect, want string }{
		{"http://127.0.0.1:8080/stores/" + st.ID + "/auth/callback", `href="http://127.0.0.1:8080/stores/` + st.ID + `/auth/callback?error=access_denied&amp;state=s"`},
		{"javascript:alert(document.domain)//", `href="/"`},
		{"https://evil.example/steal", `href="/"`},
		{"http://user@127.0.0.1/x", `href="/"`},
	} {
		q := url.Values{"store_id": {st.ID}, "code_challenge_method": {"S256"}, "code_challenge": {"c"}, "state": {"s"}, "redirect_uri": {tc.redirect}}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/demo/game/authorize?"+q.Encode(), nil))
		body := w.Body.String()
		if !strings.Contains(body, tc.want) || strings.Contains(body, `href="javascript:`) {
			t.Errorf("Cancel of redirect_uri %q: page has no %s (or links to javascript:)", tc.redirect, tc.want)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("demo page CSP = %q; want default-src 'none'", csp)
		}
	}
}
