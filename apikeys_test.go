package main

import (
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const keysPath = "/stores/" + testStoreID + "/api-keys"

// createKey makes a key with label through ta, with the key by, and
// returns the answer's data.
func (ta *testApp) createKey(t *testing.T, by, label string) map[string]any {
	t.Helper()
	status, body := ta.apiCallTo(t, "POST", keysPath, by, "application/json", `{"label":"`+label+`"}`)
	require.Equal(t, http.StatusCreated, status, "POST api-keys: %v", body)
	return body["data"].(map[string]any)
}

// keys lists the store's keys through ta, by key by.
func (ta *testApp) keys(t *testing.T, by string) []map[string]any {
	t.Helper()
	status, body := ta.apiCallTo(t, "GET", keysPath, by, "", "")
	require.Equal(t, http.StatusOK, status, "GET api-keys: %v", body)
	var list []map[string]any
	for _, k := range body["data"].([]any) {
		list = append(list, k.(map[string]any))
	}
	return list
}

// keyStatus is the status of a request with key to the store's settings.
func (ta *testApp) keyStatus(t *testing.T, key string) int {
	t.Helper()
	status, _ := ta.apiCallTo(t, "GET", settingsPath, key, "", "")
	return status
}

// TestAPIKeys: the list of a store's keys, a key made in the merchant area
// (shown once, working at once, never logged), its revocation (refused at
// once, its dashboard sessions ended), the configuration file's keys
// (which cannot be revoked), and the cap of keys a store.
func TestAPIKeys(t *testing.T) {
	logs := &lockedBuffer{}
	a, err := newApp(settingsTestConfig(t, t.TempDir(), "", "Acme", ""), slog.New(slog.NewJSONHandler(logs, nil)), false)
	require.NoError(t, err)
	ta := serveTestApp(a)
	t.Cleanup(func() { ta.stop(t) })

	start := time.Now().Unix() / 60 * 60
	list := ta.keys(t, testAPIKey)
	require.Len(t, list, 1, "keys of a store with one key in its file")
	cfgKey := list[0]
	sum := sha256.Sum256([]byte(testAPIKey))
	assert.Equal(t, keyID(sum), cfgKey["id"])
	assert.Equal(t, "config", cfgKey["source"])
	assert.Equal(t, testAPIKey[:12], cfgKey["prefix"])
	assert.NotNil(t, cfgKey["created_at"], "created_at of the file's key")
	if at, _ := cfgKey["last_used_at"].(float64); int64(at) < start || int64(at)%60 != 0 {
		t.Errorf("last_used_at of the key that listed = %v; want a minute at or after %d", cfgKey["last_used_at"], start)
	}

	made := ta.createKey(t, testAPIKey, "CI deploys")
	key, _ := made["key"].(string)
	require.True(t, strings.HasPrefix(key, "ak_") && len(key) == 46, "a new key: %q", key)
	assert.Equal(t, key[:12], made["prefix"])
	assert.Equal(t, "merchant", made["source"])
	assert.Equal(t, "CI deploys", made["label"])
	assert.Nil(t, made["last_used_at"])
	assert.True(t, strings.HasPrefix(made["id"].(string), "key_"), "id %v", made["id"])
	assert.Equal(t, http.StatusOK, ta.keyStatus(t, key), "the new key, at once")

	list = ta.keys(t, key)
	require.Len(t, list, 2)
	assert.Equal(t, made["id"], list[1]["id"])
	assert.Nil(t, list[1]["key"], "the key itself in a list")
	assert.NotNil(t, list[1]["last_used_at"], "last_used_at of a key used")

	d := newDashClient(t, ta.ts.URL)
	require.Equal(t, http.StatusOK, d.signIn(testStoreID, key).status, "dashboard sign-in with the new key")
	require.Contains(t, d.get("/dashboard/settings").body, "Acme", "signed in")

	revocations := []struct {
		name, id   string
		wantStatus int
		wantCode   string
	}{
		{"a key of the file", cfgKey["id"].(string), http.StatusConflict, "key_from_config"},
		{"unknown", "key_000000000000000000000000", http.StatusNotFound, "not_found"},
		{"the new key", made["id"].(string), http.StatusNoContent, ""},
		{"the new key again", made["id"].(string), http.StatusNotFound, "not_found"},
	}
	for _, tc := range revocations {
		t.Run("revoke "+tc.name, func(t *testing.T) {
			status, body := ta.apiCallTo(t, "DELETE", keysPath+"/"+tc.id, testAPIKey, "", "")
			if code, _ := errorFields(body); status != tc.wantStatus || code != tc.wantCode {
				t.Errorf("DELETE %s = %d %q; want %d %q", tc.id, status, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
	assert.Equal(t, http.StatusUnauthorized, ta.keyStatus(t, key), "the revoked key")
	assert.Equal(t, http.StatusOK, ta.keyStatus(t, testAPIKey), "the file's key")
	assert.Contains(t, d.get("/dashboard/settings").body, `action="/dashboard/sign-in"`, "the session of the revoked key")
	assert.Len(t, ta.keys(t, testAPIKey), 1, "keys after the revocation")

	labels := []struct {
		name, body string
		wantStatus int
	}{
		{"label of 101 characters", `{"label":"` + strings.Repeat("a", 101) + `"}`, 422},
		{"label a number", `{"label":5}`, 422},
		{"label with a control character", `{"label":"a\u0000"}`, 422},
		{"not an object", `"x"`, 400},
		{"no body", ``, 201},
		{"null label", `{"label":null}`, 201},
	}
	for _, tc := range labels {
		t.Run(tc.name, func(t *testing.T) {
			if status, body := ta.apiCallTo(t, "POST", keysPath, testAPIKey, "application/json", tc.body); status != tc.wantStatus {
				t.Errorf("POST api-keys %s = %d (%v); want %d", tc.body, status, body, tc.wantStatus)
			}
		})
	}
	t.Run("at most 10 keys", func(t *testing.T) {
		for n := len(ta.keys(t, testAPIKey)); n < maxStoreKeys; n++ {
			ta.createKey(t, testAPIKey, "")
		}
		status, body := ta.apiCallTo(t, "POST", keysPath, testAPIKey, "application/json", `{}`)
		if code, fields := errorFields(body); status != http.StatusUnprocessableEntity || code != "validation_failed" || len(fields) != 1 {
			t.Errorf("POST api-keys with %d keys = %d %q %v; want 422 validation_failed naming a field", maxStoreKeys, status, code, fields)
		}
	})
	ta.stop(t)
	assert.NotContains(t, logs.String(), key, "the new key in the log")
	assert.NotContains(t, logs.String(), testAPIKey, "the file's key in the log")
	assert.Contains(t, logs.String(), `"key_id":"`+made["id"].(string)+`"`, "the log of the key's creation and revocation")
}

// TestAPIKeyLastUsed: a key's last use is written once a minute at most,
// and again in the next minute.
func TestAPIKeyLastUsed(t *testing.T) {
	cfg := settingsTestConfig(t, t.TempDir(), "", "Acme", "")
	c := &testClock{}
	c.stopped.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	a, err := newAppAt(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false, c.now)
	require.NoError(t, err)
	ta := serveTestApp(a)
	t.Cleanup(func() { ta.stop(t) })
	id := keyID(sha256.Sum256([]byte(testAPIKey)))
	lastUsed := func() string {
		v, err := a.srv.settingsOf(t.Context(), cfg.Store(testStoreID))
		require.NoError(t, err)
		at, ok := v.LastUsed[id]
		if !ok {
			return "none"
		}
		return itoa(at)
	}
	minute := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC).Unix()
	steps := []struct {
		name    string
		advance time.Duration
		forget  bool // delete the stored last use first
		want    string
	}{
		{"first use", 0, false, itoa(minute)},
		{"same minute, not written again", 30 * time.Second, true, "none"},
		{"next minute", 30 * time.Second, false, itoa(minute + 60)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			c.stopped.Add(int64(s.advance))
			if s.forget {
				_, err := a.srv.editSettings(t.Context(), cfg.Store(testStoreID), func(v *storeSettings) error {
					delete(v.LastUsed, id)
					return nil
				})
				require.NoError(t, err)
			}
			require.Equal(t, http.StatusOK, ta.keyStatus(t, testAPIKey))
			if got := lastUsed(); got != s.want {
				t.Errorf("last use stored = %q; want %q", got, s.want)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAPIKeysSurviveCrash: a key made (201) and a key revoked (204) are on
// disk when answered: after the process is dropped without writing its
// state (kill -9), the one works and the other is refused.
func TestAPIKeysSurviveCrash(t *testing.T) {
	cfg := settingsTestConfig(t, t.TempDir(), "", "Acme", "")
	a1 := openTestApp(t, cfg)
	kept := a1.createKey(t, testAPIKey, "kept")
	revoked := a1.createKey(t, testAPIKey, "revoked")
	status, body := a1.apiCallTo(t, "DELETE", keysPath+"/"+revoked["id"].(string), testAPIKey, "", "")
	require.Equal(t, http.StatusNoContent, status, "DELETE: %v", body)
	a1.ts.Close() // a1 is dropped, its state never written

	a2 := openTestApp(t, cfg)
	assert.Equal(t, http.StatusOK, a2.keyStatus(t, kept["key"].(string)), "the key made before the crash")
	assert.Equal(t, http.StatusUnauthorized, a2.keyStatus(t, revoked["key"].(string)), "the key revoked before the crash")
}
