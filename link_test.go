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
