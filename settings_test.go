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
	a2.stop(t)

	// A file that leaves game_authorize_url out says nothing of it.
	a2 = startApp(t, settingsTestConfig(t, dir, "", "First", ""))
	assert.Empty(t, a2.srv.configWarnings(), "warnings of a start whose file leaves game_authorize_url out")
	got, status = a2.linkTarget(t)
	assert.Equal(t, "https://game.example.com/a", got, "link after a start whose file leaves it out (status %d)", status)

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

// apiCallTo sends a request with the test key (key "" sends none) to ta
// and returns the status and the decoded body.
func (ta *testApp) apiCallTo(t *testing.T, method, path, key, contentType, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, ta.ts.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := ta.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var got map[string]any
	if resp.StatusCode != http.StatusNoContent {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got), "%s %s: the body", method, path)
	}
	return resp.StatusCode, got
}

// settings GETs the store's settings through ta.
func (ta *testApp) settings(t *testing.T) map[string]any {
	t.Helper()
	status, body := ta.apiCallTo(t, "GET", settingsPath, testAPIKey, "", "")
	require.Equal(t, http.StatusOK, status, "GET settings: %v", body)
	return body["data"].(map[string]any)
}

// patchSettings PATCHes the store's settings through ta with body.
func (ta *testApp) patchSettings(t *testing.T, body string) (int, map[string]any) {
	t.Helper()
	return ta.apiCallTo(t, "PATCH", settingsPath, testAPIKey, "application/json", body)
}

const settingsPath = "/stores/" + testStoreID + "/settings"

// errorFields returns the fields an error body names, and its code.
func errorFields(body map[string]any) (code string, fields []string) {
	e, _ := body["error"].(map[string]any)
	code, _ = e["code"].(string)
	list, _ := e["fields"].([]any)
	for _, f := range list {
		fields = append(fields, f.(map[string]any)["field"].(string))
	}
	return code, fields
}

// TestSettingsAPI checks GET and PATCH of a store's settings, every rule
// of a PATCH, and that a refused PATCH changes nothing.
func TestSettingsAPI(t *testing.T) {
	a := startApp(t, settingsTestConfig(t, t.TempDir(), "", "Acme", "https://game.example.com/oauth/authorize"))
	got := a.settings(t)
	assert.Equal(t, testStoreID, got["id"])
	assert.Equal(t, "Acme", got["name"])
	assert.Equal(t, "https://game.example.com/oauth/authorize", got["game_authorize_url"])
	assert.Equal(t, []any{"shop.example.com"}, got["redirect_domains"])
	assert.NotZero(t, got["updated_at"])

	long := "https://game.example.com/" + strings.Repeat("a", 2048)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantFields []string
		wantName   any // after the call, when it succeeds
		wantURL    any
		warns      bool
	}{
		{"name", `{"name":"Acme Games"}`, 200, "", nil, "Acme Games", "https://game.example.com/oauth/authorize", false},
		{"name of 100 characters", `{"name":"` + strings.Repeat("é", 100) + `"}`, 200, "", nil, strings.Repeat("é", 100), "https://game.example.com/oauth/authorize", false},
		{"url", `{"game_authorize_url":"https://play.example.com:8443/a?x=1"}`, 200, "", nil, strings.Repeat("é", 100), "https://play.example.com:8443/a?x=1", false},
		{"custom scheme", `{"game_authorize_url":"mygame://authorize"}`, 200, "", nil, strings.Repeat("é", 100), "mygame://authorize", true},
		{"null turns sign-in off", `{"name":"Acme","game_authorize_url":null}`, 200, "", nil, "Acme", nil, false},
		{"nothing", `{}`, 200, "", nil, "Acme", nil, false},
		{"empty name", `{"name":""}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"blank name", `{"name":"   "}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"name of 101 characters", `{"name":"` + strings.Repeat("a", 101) + `"}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"null name", `{"name":null}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"name a number", `{"name":5}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"name with a control character", `{"name":"a\u0007b"}`, 422, "validation_failed", []string{"name"}, nil, nil, false},
		{"javascript", `{"game_authorize_url":"javascript:alert(1)"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"javascript with slashes", `{"game_authorize_url":"JavaScript://x/%0aalert(1)"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"data", `{"game_authorize_url":"data:text/html,<script>1</script>"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"data with slashes", `{"game_authorize_url":"data://text/html,x"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"file", `{"game_authorize_url":"file:///etc/passwd"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"blob", `{"game_authorize_url":"blob://x"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"vbscript", `{"game_authorize_url":"vbscript://x"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"http", `{"game_authorize_url":"http://game.example.com/a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"http localhost, insecure URLs not allowed", `{"game_authorize_url":"http://localhost:9000/a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"userinfo", `{"game_authorize_url":"https://u:p@game.example.com/a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"fragment", `{"game_authorize_url":"https://game.example.com/a#b"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"relative", `{"game_authorize_url":"/oauth/authorize"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"no host", `{"game_authorize_url":"https:///a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"bad port", `{"game_authorize_url":"https://game.example.com:99999/a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"scheme not a scheme", `{"game_authorize_url":"1game://a"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"custom scheme, nothing after it", `{"game_authorize_url":"mygame://"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"empty url", `{"game_authorize_url":""}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"too long", `{"game_authorize_url":"` + long + `"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"url a number", `{"game_authorize_url":5}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"both bad, both named", `{"name":"","game_authorize_url":"javascript:x"}`, 422, "validation_failed", []string{"name", "game_authorize_url"}, nil, nil, false},
		{"one bad, the other not made", `{"name":"Never","game_authorize_url":"ftp:x"}`, 422, "validation_failed", []string{"game_authorize_url"}, nil, nil, false},
		{"not an object", `[]`, 400, "invalid_json", nil, nil, nil, false},
		{"a member twice", `{"name":"a","name":"b"}`, 400, "invalid_json", nil, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := a.settings(t)
			status, body := a.patchSettings(t, tc.body)
			code, fields := errorFields(body)
			if status != tc.wantStatus || code != tc.wantCode {
				t.Fatalf("PATCH %s = %d %q; want %d %q (%v)", tc.body, status, code, tc.wantStatus, tc.wantCode, body)
			}
			assert.Equal(t, tc.wantFields, fields, "fields named")
			after := a.settings(t)
			if status != http.StatusOK {
				assert.Equal(t, before, after, "settings after a refused PATCH")
				return
			}
			assert.Equal(t, after, body["data"], "the PATCH's answer and a GET after it")
			assert.Equal(t, tc.wantName, after["name"])
			assert.Equal(t, tc.wantURL, after["game_authorize_url"])
			_, warned := body["warnings"]
			assert.Equal(t, tc.warns, warned, "warnings: %v", body["warnings"])
		})
	}

	refusals := []struct {
		name, method, path, key, ctype, body string
		wantStatus                           int
		wantCode                             string
	}{
		{"no key", "PATCH", settingsPath, "", "application/json", `{"name":"x"}`, 401, "unauthorized"},
		{"wrong key", "GET", settingsPath, "ak_wrong", "", "", 401, "unauthorized"},
		{"unknown store", "GET", "/stores/00000000-0000-4000-8000-000000000000/settings", testAPIKey, "", "", 404, "store_not_found"},
		{"not JSON", "PATCH", settingsPath, testAPIKey, "text/plain", `{"name":"x"}`, 415, "unsupported_media_type"},
		{"too large", "PATCH", settingsPath, testAPIKey, "application/json", `{"name":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "body_too_large"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			status, body := a.apiCallTo(t, tc.method, tc.path, tc.key, tc.ctype, tc.body)
			if code, _ := errorFields(body); status != tc.wantStatus || code != tc.wantCode {
				t.Errorf("%s %s = %d %q; want %d %q", tc.method, tc.path, status, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
}

// TestSettingsInsecureLocalhost: with allow_insecure_urls, http is
// accepted for localhost and 127.0.0.1, and for no other host.
func TestSettingsInsecureLocalhost(t *testing.T) {
	cfg := settingsTestConfig(t, t.TempDir(), "", "Acme", "")
	cfg.Webhooks.AllowInsecureURLs = true
	a := startApp(t, cfg)
	tests := []struct {
		url  string
		want int
	}{
		{"http://localhost:9000/a", 200},
		{"http://127.0.0.1/a", 200},
		{"http://game.example.com/a", 422},
		{"http://10.0.0.1/a", 422},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			if status, body := a.patchSettings(t, `{"game_authorize_url":"`+tc.url+`"}`); status != tc.want {
				t.Errorf("PATCH game_authorize_url %q = %d (%v); want %d", tc.url, status, body, tc.want)
			}
		})
	}
}

// TestSettingsSurviveCrash: a settings change answered 200 is on disk: the
// process dropped without writing its state (kill -9), a new one on the
// same data_dir has it.
func TestSettingsSurviveCrash(t *testing.T) {
	cfg := settingsTestConfig(t, t.TempDir(), "", "Acme", "https://game.example.com/a")
	a1 := openTestApp(t, cfg)
	status, body := a1.patchSettings(t, `{"name":"After","game_authorize_url":"https://moved.example.com/b"}`)
	require.Equal(t, http.StatusOK, status, "PATCH: %v", body)
	a1.ts.Close() // a1 is dropped, its state never written

	a2 := openTestApp(t, cfg)
	got := a2.settings(t)
	assert.Equal(t, "After", got["name"], "the name after a crash")
	assert.Equal(t, "https://moved.example.com/b", got["game_authorize_url"], "the Game Authorize URL after a crash")
}
