package main

import (
	"encoding/json"
	"html"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallbackGameError: an error the game app sends back gets a page in
// plain words, the code in small print, and a way back to where the
// player started.
func TestCallbackGameError(t *testing.T) {
	f := startFlow(t)
	tests := []struct {
		code, title, says string
	}{
		{"access_denied", "Sign-in cancelled", "You cancelled the sign-in in the game."},
		{"server_error", "Sign-in failed", "The game app did not complete the sign-in."},
		{"temporarily_unavailable", "Sign-in failed", "The game app did not complete the sign-in."},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			cookies, callback := f.startLink(t, "/cart?item=7")
			u, err := url.Parse(callback)
			require.NoError(t, err)
			q := u.Query()
			q.Del("code")
			q.Set("error", tt.code)
			u.RawQuery = q.Encode()
			got := f.get(t, u.String(), cookies...)
			requireCallbackFailed(t, got, tt.says)
			body := string(got.body)
			for _, want := range []string{"<h1>" + tt.title + "</h1>", "<code>" + tt.code + "</code>", `href="` + html.EscapeString("/cart?item=7") + `">Back to the shop</a>`} {
				assert.Contains(t, body, want, "callback with error=%s", tt.code)
			}
			assert.NotContains(t, body, "("+tt.code+")", "the raw code in the message")
			assert.Contains(t, got.header.Get("Content-Security-Policy"), "default-src 'none'")
		})
	}
}

// TestLinkNotConfigured: the link of a store without a Game Authorize URL
// is 404 not_configured: a page for a browser, the JSON error for any
// other client (docs/api.md).
func TestLinkNotConfigured(t *testing.T) {
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(testConfig(cfgOpts{})), &cfg))
	delete(cfg["stores"].([]any)[0].(map[string]any), "game_authorize_url")
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	h := newTestApp(t, string(b)).srv.handler()
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
	tests := []struct {
		accept string
		page   bool
	}{
		{browser, true},
		{"text/html", true},
		{"", false},
		{"application/json", false},
		{"*/*", false},
		{"text/html;q=0, application/json", false},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "https://shop.example.com/stores/"+storeA+"/auth/link?return_to=/cart", nil)
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusNotFound, rec.Code, "GET link with Accept %q; body %s", tt.accept, rec.Body)
			assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			assert.Empty(t, rec.Result().Cookies(), "no link cookie")
			mt, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type"))
			if !tt.page {
				assert.Equal(t, "application/json", mt, "Content-Type")
				var body struct{ Error apiError }
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body %s", rec.Body)
				assert.Equal(t, "not_configured", body.Error.Code, "error code")
				return
			}
			assert.Equal(t, "text/html", mt, "Content-Type")
			page := rec.Body.String()
			for _, want := range []string{"<h1>Sign-in is not set up</h1>", "<code>not_configured</code>", `href="/cart">Back to the shop</a>`} {
				assert.Contains(t, page, want)
			}
			assert.False(t, strings.HasPrefix(strings.TrimSpace(page), "{"), "raw JSON for a browser")
		})
	}
	t.Run("the other store still links", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://shop.example.com/stores/"+storeB+"/auth/link", nil))
		assert.Equal(t, http.StatusFound, rec.Code)
	})
}

// TestNoPublicBase: a configuration that leaves public_base_url out, for a
// service that does not listen on a loopback address, has the browser
// flow off: link and callback are 404 not_configured, config says sign-in
// is off, the start warns with the fix; the API works.
func TestNoPublicBase(t *testing.T) {
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(testConfig(cfgOpts{})), &cfg))
	delete(cfg, "public_base_url")
	cfg["listen"] = "0.0.0.0:8080"
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	a := newTestApp(t, string(b))
	a.srv.cfg.PublicBase(a.srv.cfg.Listen) // as main does with the address it listens on
	h := a.srv.handler()
	for _, path := range []string{"/auth/link?return_to=/cart", "/auth/callback?code=c&state=s"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stores/"+storeA+path, nil))
		var body struct{ Error apiError }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "GET %s: body %s", path, rec.Body)
		if rec.Code != http.StatusNotFound || body.Error.Code != "not_configured" || !strings.Contains(body.Error.Message, "public_base_url") {
			t.Errorf("GET %s = %d %s; want 404 not_configured naming public_base_url", path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stores/"+storeA+"/auth/config", nil))
	assert.JSONEq(t, `{"data":{"link_to_game":false}}`, rec.Body.String(), "GET auth/config")
	assert.Contains(t, strings.Join(a.srv.configWarnings(), "\n"), "public_base_url is not set", "the start's warnings")

	rec = httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/stores/"+storeA+"/auth/auth-code", strings.NewReader(string(mustJSON(t, registration(newAuthCode(t), rfc7636Challenge)))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", keyA)
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code, "register: body %s", rec.Body)
}

// TestStoreWithoutRedirectDomains: a store whose registrations can never
// pass is named at start, with the fix.
func TestStoreWithoutRedirectDomains(t *testing.T) {
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(testConfig(cfgOpts{})), &cfg))
	delete(cfg["stores"].([]any)[1].(map[string]any), "redirect_domains")
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	ws := strings.Join(newTestApp(t, string(b)).srv.configWarnings(), "\n")
	if want := "store " + storeB + ": redirect_domains is empty"; !strings.Contains(ws, want) {
		t.Errorf("configWarnings() = %q; want one containing %q", ws, want)
	}
	if strings.Contains(ws, "store "+storeA+": redirect_domains") {
		t.Errorf("configWarnings() = %q; want none about store A, which has redirect domains", ws)
	}
}
