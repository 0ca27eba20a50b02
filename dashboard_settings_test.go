package main

import (
	"crypto/sha256"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the dashboard's Settings page through the real mux: the forms
// posted as a browser without script posts them.

// settingsApp serves one store (testStoreID, named Acme, with a Game
// Authorize URL) and returns it with its log and a browser signed in with
// the file's key.
func settingsApp(t *testing.T) (*testApp, *lockedBuffer, *dashClient) {
	t.Helper()
	logs := &lockedBuffer{}
	a, err := newApp(settingsTestConfig(t, t.TempDir(), "", "Acme", "https://game.example.com/oauth/authorize"), slog.New(slog.NewJSONHandler(logs, nil)), false)
	require.NoError(t, err)
	ta := serveTestApp(a)
	t.Cleanup(func() { ta.stop(t) })
	d := newDashClient(t, ta.ts.URL)
	require.Equal(t, http.StatusOK, d.signIn(testStoreID, testAPIKey).status, "sign-in with the file's key")
	d.get("/dashboard/settings")
	return ta, logs, d
}

// TestDashboardSettingsSave: the Save of the Settings page keeps a good
// name and URL, refuses a bad one with the API's reason on the page and
// nothing changed, warns of a custom scheme, and turns sign-in off with
// an empty URL.
func TestDashboardSettingsSave(t *testing.T) {
	ta, logs, d := settingsApp(t)
	long := "https://game.example.com/" + strings.Repeat("a", 2048)
	tests := []struct {
		name, formName, formURL string
		wantStatus              int
		wantShown               []string // on the page that follows
		wantName                string   // in the API's settings after; "" for unchanged
		wantURL                 any      // likewise; nil for null, "" for unchanged
	}{
		{"a good name and URL", "Acme Games", "https://game.example.com/v2/authorize", http.StatusOK,
			[]string{"Settings saved.", `value="https://game.example.com/v2/authorize"`}, "Acme Games", "https://game.example.com/v2/authorize"},
		{"empty name", "", "https://game.example.com/v3", http.StatusUnprocessableEntity,
			[]string{"Name is required: 1 to 100 characters, not all spaces.", `value="https://game.example.com/v3"`}, "", ""},
		{"name of 101 characters", strings.Repeat("n", 101), "https://game.example.com/v3", http.StatusUnprocessableEntity,
			[]string{"Name is longer than 100 characters."}, "", ""},
		{"a javascript: URL", "Acme", "javascript:alert(1)", http.StatusUnprocessableEntity,
			[]string{"Game Authorize URL must be an absolute https URL"}, "", ""},
		{"a javascript:// URL", "Acme", "javascript://%0aalert(1)", http.StatusUnprocessableEntity,
			[]string{"Game Authorize URL must not be a javascript: URL"}, "", ""},
		{"an http URL", "Acme", "http://game.example.com/authorize", http.StatusUnprocessableEntity,
			[]string{"Game Authorize URL must be https"}, "", ""},
		{"a URL too long", "Acme", long, http.StatusUnprocessableEntity,
			[]string{"Game Authorize URL is longer than 2048 characters."}, "", ""},
		{"a custom scheme", "Acme Games", "mygame://authorize", http.StatusOK,
			[]string{"Settings saved.", "Warning: a custom scheme can be claimed by any app installed"}, "", "mygame://authorize"},
		{"no URL: sign-in off", "Acme Games", "  ", http.StatusOK,
			[]string{"Settings saved."}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := ta.settings(t)
			p := d.post("/dashboard/settings", url.Values{"name": {tc.formName}, "game_authorize_url": {tc.formURL}})
			if p.status != tc.wantStatus {
				t.Fatalf("Save(%q, %q) = %d; want %d", tc.formName, tc.formURL, p.status, tc.wantStatus)
			}
			for _, want := range tc.wantShown {
				assert.Contains(t, html.UnescapeString(p.body), html.UnescapeString(want), "the page after Save(%q, %q)", tc.formName, tc.formURL)
			}
			after := ta.settings(t)
			if tc.wantStatus != http.StatusOK {
				assert.Equal(t, before, after, "the settings after a refused Save")
				assert.Contains(t, html.UnescapeString(p.body), `value="`+tc.formURL+`"`, "the URL as typed, kept in its field")
				return
			}
			if tc.wantName != "" {
				assert.Equal(t, tc.wantName, after["name"], "name after Save")
			}
			if tc.wantURL != "" {
				assert.Equal(t, tc.wantURL, after["game_authorize_url"], "game_authorize_url after Save")
			}
		})
	}

	resp, cfg := ta.authConfig(t, testStoreID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, false, cfg["link_to_game"], "auth/config once the URL field was saved empty")
	p := d.get("/dashboard/settings")
	assert.Contains(t, p.body, `id="game_authorize_url" name="game_authorize_url" type="url" value=""`, "the field once sign-in is off")
	assert.NotContains(t, p.body, "Settings saved.", "a page opened again, not sent to after a change")

	ta.stop(t)
	log := logs.String()
	id := keyID(sha256.Sum256([]byte(testAPIKey)))
	for _, field := range []string{"name", "game_authorize_url"} {
		assert.Regexp(t, `"msg":"store settings: changed","store":"`+testStoreID+`","field":"`+field+`","key_id":"`+id+`"`, log, "the log of a change of %s", field)
	}
	assert.NotContains(t, log, testAPIKey, "the key in the log")
}

var apiKeyPattern = regexp.MustCompile(`ak_[A-Za-z0-9_-]{43}`)

// TestDashboardAPIKeys: the API keys of the Settings page. A key made
// there is shown once and works at once; Revoke, confirmed, refuses it at
// once; the file's keys have no Revoke; revoking the session's own key
// ends the session on the sign-in page, which says why.
func TestDashboardAPIKeys(t *testing.T) {
	ta, logs, d := settingsApp(t)
	p := d.get("/dashboard/settings")
	assert.Contains(t, p.body, "api_keys[0]", "the file's key, by its place in the file")
	assert.Contains(t, p.body, testAPIKey[:12]+"…", "the file's key's first characters")
	assert.Contains(t, p.body, "the configuration file", "the file's key's source")
	assert.NotContains(t, p.body, ">Revoke</a>", "Revoke of a key of the file")

	p = d.post("/dashboard/settings/api-keys", url.Values{"label": {"CI deploys"}})
	require.Equal(t, http.StatusOK, p.status, "Create API key")
	require.Contains(t, p.body, `data-copy="key">Copy</button>`, "the new key's page")
	key := apiKeyPattern.FindString(p.body)
	require.NotEmpty(t, key, "the key shown: %s", p.body)
	assert.Contains(t, p.body, "CI deploys")
	assert.Equal(t, http.StatusOK, ta.keyStatus(t, key), "the new key, with the API, at once")

	again := d.get("/dashboard/settings/new-key")
	assert.Equal(t, http.StatusOK, again.status)
	assert.Contains(t, again.body, "<h1>Settings</h1>", "the new key's page opened again")
	assert.NotContains(t, again.body, key, "the key, opened again")
	assert.Contains(t, again.body, key[:12]+"…", "the new key's first characters in the list")
	assert.Contains(t, again.body, "the merchant area", "the new key's source")
	assert.Equal(t, 1, strings.Count(again.body, ">Revoke</a>"), "Revoke: the new key's only")
	made := keyID(sha256.Sum256([]byte(key)))

	cfgKey := keyID(sha256.Sum256([]byte(testAPIKey)))
	for _, tc := range []struct {
		name, method, path string
		wantStatus         int
		want               string
	}{
		{"confirm, a key of the file", "GET", cfgKey, http.StatusConflict, "removes it there"},
		{"revoke, a key of the file", "POST", cfgKey, http.StatusConflict, "removes it there"},
		{"confirm, no such key", "GET", "key_000000000000000000000000", http.StatusNotFound, "no API key with that id"},
		{"confirm, the new key", "GET", made, http.StatusOK, "This cannot be undone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/dashboard/settings/api-keys/" + tc.path + "/revoke"
			var p page
			if tc.method == "GET" {
				p = d.get(path)
			} else {
				p = d.post(path, nil)
			}
			if p.status != tc.wantStatus || !strings.Contains(p.body, tc.want) {
				t.Errorf("%s %s = %d; want %d and %q in %s", tc.method, path, p.status, tc.wantStatus, tc.want, p.body)
			}
		})
	}
	assert.Equal(t, http.StatusOK, ta.keyStatus(t, testAPIKey), "the file's key after its Revoke was refused")

	p = d.post("/dashboard/settings/api-keys/"+made+"/revoke", nil)
	assert.Equal(t, http.StatusOK, p.status, "Revoke, confirmed")
	assert.Contains(t, p.body, "API key revoked.")
	assert.NotContains(t, p.body, key[:12], "the revoked key in the list")
	assert.Equal(t, http.StatusUnauthorized, ta.keyStatus(t, key), "the revoked key, with the API, at once")

	p = d.post("/dashboard/settings/api-keys", url.Values{"label": {strings.Repeat("l", 101)}})
	assert.Equal(t, http.StatusUnprocessableEntity, p.status, "a label of 101 characters")
	assert.Contains(t, p.body, "Label is longer than 100 characters.")
	assert.Len(t, ta.keys(t, testAPIKey), 1, "keys after a refused Create")

	t.Run("the session's own key", func(t *testing.T) {
		own := newDashClient(t, ta.ts.URL)
		p := d.post("/dashboard/settings/api-keys", url.Values{"label": {"mine"}})
		ownKey := apiKeyPattern.FindString(p.body)
		require.NotEmpty(t, ownKey)
		require.Equal(t, http.StatusOK, own.signIn(testStoreID, ownKey).status)
		id := keyID(sha256.Sum256([]byte(ownKey)))
		assert.Contains(t, own.get("/dashboard/settings/api-keys/"+id+"/revoke").body, "revoking it ends this session")
		p = own.post("/dashboard/settings/api-keys/"+id+"/revoke", nil)
		assert.Equal(t, http.StatusOK, p.status)
		assert.Contains(t, p.body, `action="/dashboard/sign-in"`, "the page after revoking the session's key")
		assert.Contains(t, p.body, "You revoked the API key this session was signed in with")
		u, _ := url.Parse(own.base)
		assert.Empty(t, own.c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/dashboard/"}), "the cookie is forgotten")
		assert.Equal(t, http.StatusUnauthorized, ta.keyStatus(t, ownKey))
		assert.Contains(t, d.get("/dashboard/settings").body, "<h1>Settings</h1>", "the session of another key")
	})

	ta.stop(t)
	log := logs.String()
	for _, what := range []string{"created", "revoked"} {
		assert.Regexp(t, `"msg":"api keys: `+what+`","store":"`+testStoreID+`","field":"api_keys","key_id":"`+made+`","by_key_id":"`+cfgKey+`"`, log, "the log of the key's %s", what)
	}
	assert.NotContains(t, log, key, "the key in the log")
}

// TestDashboardSettingsRefusesCrossSite: each change of the Settings page
// without the page's token, or from another site, is refused with 403
// and changes nothing.
func TestDashboardSettingsRefusesCrossSite(t *testing.T) {
	ta, _, d := settingsApp(t)
	made := ta.createKey(t, testAPIKey, "kept")
	key := made["key"].(string)
	before := ta.settings(t)
	changes := []struct {
		path string
		form url.Values
	}{
		{"/dashboard/settings", url.Values{"name": {"Evil"}, "game_authorize_url": {"https://evil.example/authorize"}}},
		{"/dashboard/settings", url.Values{"name": {"Acme"}, "game_authorize_url": {""}}},
		{"/dashboard/settings/api-keys", url.Values{"label": {"evil"}}},
		{"/dashboard/settings/api-keys/" + made["id"].(string) + "/revoke", nil},
		{"/dashboard/settings/check", nil},
	}
	refusals := []struct {
		name   string
		csrf   []string
		header []string
	}{
		{"no token", []string{""}, nil},
		{"wrong token", []string{"forged"}, nil},
		{"another origin", nil, []string{"Origin", "https://evil.example"}},
		{"cross-site fetch", nil, []string{"Sec-Fetch-Site", "cross-site"}},
	}
	for _, c := range changes {
		for _, r := range refusals {
			t.Run(r.name+" "+c.path, func(t *testing.T) {
				form := url.Values{}
				for k, v := range c.form {
					form[k] = v
				}
				if r.csrf != nil {
					form["csrf"] = r.csrf
				}
				p := d.post(c.path, form, r.header...)
				if p.status != http.StatusForbidden {
					t.Errorf("POST %s (%s) = %d; want 403", c.path, r.name, p.status)
				}
			})
		}
	}
	assert.Equal(t, before, ta.settings(t), "the settings after the refused changes")
	assert.Len(t, ta.keys(t, testAPIKey), 2, "the keys after the refused changes")
	assert.Equal(t, http.StatusOK, ta.keyStatus(t, key), "the key a refused Revoke named")
}

// TestNewKeySealed: the key kept for the page that shows it once opens
// with the session's cookie only.
func TestNewKeySealed(t *testing.T) {
	sealed := sealNewKey("cookie", "dash:abc", "ak_secret")
	assert.NotContains(t, string(sealed), "ak_secret", "the sealed key")
	for _, tc := range []struct {
		cookie, sess, want string
		ok                 bool
	}{
		{"cookie", "dash:abc", "ak_secret", true},
		{"another cookie", "dash:abc", "", false},
		{"cookie", "dash:other", "", false},
	} {
		got, err := openNewKey(tc.cookie, tc.sess, sealed)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("openNewKey(%q, %q) = %q, %v; want %q, ok %v", tc.cookie, tc.sess, got, err, tc.want, tc.ok)
		}
	}
	if _, err := openNewKey("cookie", "dash:abc", sealed[:5]); err == nil {
		t.Errorf("openNewKey(a few bytes) = nil error; want one")
	}
}
