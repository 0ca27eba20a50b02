package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// authConfig GETs the store's auth/config through ta, with the headers
// (name, value pairs), and returns the answer and its decoded data.
func (ta *testApp) authConfig(t *testing.T, store string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ta.ts.URL+"/stores/"+store+"/auth/config", nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := ta.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Data map[string]any `json:"data"`
	}
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	}
	return resp, body.Data
}

// TestAuthConfig: auth/config says whether the store has sign-in on, as
// its settings stand now (a change shows at the next request, never
// cached without asking again), and where its link starts; pages on the
// store's redirect domains may read it.
func TestAuthConfig(t *testing.T) {
	ta := startApp(t, settingsTestConfig(t, t.TempDir(), "", "Acme", "https://game.example.com/oauth/authorize"))
	link := "https://shop.example.com/stores/" + testStoreID + "/auth/link"
	for _, tt := range []struct {
		name  string
		patch string // the settings' change first; "" for none
		want  map[string]any
	}{
		{"configured", "", map[string]any{"link_to_game": true, "link_url": link}},
		{"turned off", `{"game_authorize_url": null}`, map[string]any{"link_to_game": false}},
		{"turned on again", `{"game_authorize_url": "https://game.example.com/v2/authorize"}`, map[string]any{"link_to_game": true, "link_url": link}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.patch != "" {
				status, body := ta.patchSettings(t, tt.patch)
				require.Equal(t, http.StatusOK, status, "PATCH settings %s: %v", tt.patch, body)
			}
			resp, got := ta.authConfig(t, testStoreID)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, tt.want, got, "GET auth/config")
			assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
		})
	}
	t.Run("CORS", func(t *testing.T) {
		for _, tt := range []struct{ origin, want string }{
			{"https://shop.example.com", "https://shop.example.com"},
			{"https://evil.example.com", ""},
		} {
			resp, _ := ta.authConfig(t, testStoreID, "Origin", tt.origin)
			assert.Equal(t, tt.want, resp.Header.Get("Access-Control-Allow-Origin"), "Access-Control-Allow-Origin for %s", tt.origin)
		}
	})
	t.Run("unknown store", func(t *testing.T) {
		resp, _ := ta.authConfig(t, "0c5e0c3e-0000-4000-8000-000000000000")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

// TestButtonFiles: the drop-in's script and style sheet, for a known
// store, as what they are (the page's CSP and nosniff rely on the type).
func TestButtonFiles(t *testing.T) {
	ta := startApp(t, settingsTestConfig(t, t.TempDir(), "", "Acme", ""))
	for _, tt := range []struct {
		path, store string
		wantStatus  int
		wantType    string
		wantInBody  string
	}{
		{"button.js", testStoreID, 200, "text/javascript; charset=utf-8", `"Link to game"`},
		{"button.css", testStoreID, 200, "text/css; charset=utf-8", ".deeplink-button"},
		{"button.js", "0c5e0c3e-0000-4000-8000-000000000000", 404, "application/json", "store_not_found"},
	} {
		t.Run(tt.path+" of "+tt.store, func(t *testing.T) {
			resp, err := ta.ts.Client().Get(ta.ts.URL + "/stores/" + tt.store + "/auth/" + tt.path)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tt.wantStatus, resp.StatusCode)
			assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), tt.wantType), "Content-Type %q; want %q", resp.Header.Get("Content-Type"), tt.wantType)
			assert.Contains(t, string(b), tt.wantInBody)
			if tt.wantStatus == 200 {
				assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			}
		})
	}
}
