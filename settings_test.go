package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settingsTestConfig is the configuration of one store (testStoreID, key
// testAPIKey) named name with the Game Authorize URL game, its state in
// dataDir (or on the Redis at redisURL, when set).
func settingsTestConfig(t testing.TB, dataDir, redisURL, name, game string) *Config {
	t.Helper()
	st := map[string]any{
		"id":               testStoreID,
		"name":             name,
		"api_keys":         []string{testAPIKey},
		"redirect_domains": []string{"shop.example.com"},
	}
	if game != "" {
		st["game_authorize_url"] = game
	}
	c := map[string]any{
		"data_dir":        dataDir,
		"public_base_url": "https://shop.example.com",
		"stores":          []map[string]any{st},
	}
	if redisURL != "" {
		c["storage"] = map[string]any{"backend": "redis", "redis_url": redisURL, "redis_prefix": "settings-test:"}
	}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	cfg, err := ParseConfig(b)
	require.NoError(t, err)
	return cfg
}

// linkTarget follows the store's link and returns where it sends the
// browser, or "" with the status when it does not.
func (ta *testApp) linkTarget(t *testing.T) (string, int) {
	t.Helper()
	c := *ta.ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(ta.ts.URL + "/stores/" + testStoreID + "/auth/link")
	require.NoError(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		return "", resp.StatusCode
	}
	loc, _, _ := strings.Cut(resp.Header.Get("Location"), "?")
	return loc, resp.StatusCode
}

// TestSettingsSeededAtFirstStart: the configuration file seeds a store's
// name and Game Authorize URL at its first start; a later start with
// another file leaves the stored ones standing and warns, naming store
// and field; the link and the dashboard follow the stored settings.
func TestSettingsSeededAtFirstStart(t *testing.T) {
	dir := t.TempDir()
	a1 := startApp(t, settingsTestConfig(t, dir, "", "First", "https://game.example.com/a"))
	got, status := a1.linkTarget(t)
	require.Equal(t, "https://game.example.com/a", got, "link at the first start (status %d)", status)
	assert.Empty(t, a1.srv.configWarnings(), "warnings at the first start")
	a1.stop(t)

	a2 := startApp(t, settingsTestConfig(t, dir, "", "Second", "https://other.example.com/b"))
	warnings := strings.Join(a2.srv.configWarnings(), "\n")
	for _, field := range []string{"name", "game_authorize_url"} {
		assert.Contains(t, warnings, "store "+testStoreID+": "+field+" in the configuration file differs", "warnings of a start whose file differs")
	}
	got, status = a2.linkTarget(t)
	assert.Equal(t, "https://game.example.com/a", got, "link after a start with another file (status %d)", status)

	d := newDashClient(t, a2.ts.URL)
	require.Equal(t, http.StatusOK, d.signIn(testStoreID, testAPIKey).status)
	p := d.get("/dashboard/settings")
	assert.Contains(t, p.body, "First", "the stored name on the Settings page")
	assert.NotContains(t, p.body, "Second", "the file's name on the Settings page")

	tests := []struct {
		name, url  string
		wantTarget string
		wantStatus int
	}{
		{"moved", "https://moved.example.com/c", "https://moved.example.com/c", http.StatusFound},
		{"off", "", "", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a2.srv.editSettings(t.Context(), a2.srv.cfg.Store(testStoreID), func(v *storeSettings) error {
				v.GameAuthorizeURL = tc.url
				return nil
			})
			require.NoError(t, err)
			got, status := a2.linkTarget(t)
			if got != tc.wantTarget || status != tc.wantStatus {
				t.Errorf("link with game_authorize_url %q = %q, %d; want %q, %d", tc.url, got, status, tc.wantTarget, tc.wantStatus)
			}
		})
	}
}
