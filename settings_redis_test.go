//go:build !wasip1

package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store/redisstore/redistest"
)

// startRedisReplicas starts n replicas of the service in this process,
// each with its own server, all on one Redis, with the configuration of
// settingsTestConfig.
func startRedisReplicas(t *testing.T, n int, name, game string) []*testApp {
	t.Helper()
	rd := redistest.New(t, redistest.Persistent...)
	var replicas []*testApp
	for range n {
		replicas = append(replicas, startApp(t, settingsTestConfig(t, t.TempDir(), rd.URL(), name, game)))
	}
	return replicas
}

// TestSettingsReplicas: two replicas on one Redis. The first start seeds
// the settings; a PATCH through one is in force on the next request to
// the other: its GET, and its link.
func TestSettingsReplicas(t *testing.T) {
	r := startRedisReplicas(t, 2, "Acme", "https://game.example.com/a")
	a, b := r[0], r[1]
	tests := []struct {
		name, body string
		wantName   string
		wantLink   string
		wantStatus int
	}{
		{"moved on A", `{"name":"Acme 2","game_authorize_url":"https://moved.example.com/b"}`, "Acme 2", "https://moved.example.com/b", http.StatusFound},
		{"off on B", `{"game_authorize_url":null}`, "Acme 2", "", http.StatusNotFound},
		{"on again on A", `{"game_authorize_url":"https://game.example.com/c"}`, "Acme 2", "https://game.example.com/c", http.StatusFound},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			on, other := a, b
			if i%2 == 1 {
				on, other = b, a
			}
			status, body := on.patchSettings(t, tc.body)
			require.Equal(t, http.StatusOK, status, "PATCH: %v", body)
			assert.Equal(t, tc.wantName, other.settings(t)["name"], "the name on the other replica")
			got, status := other.linkTarget(t)
			if got != tc.wantLink || status != tc.wantStatus {
				t.Errorf("link on the other replica = %q, %d; want %q, %d", got, status, tc.wantLink, tc.wantStatus)
			}
		})
	}
}

// TestAPIKeysReplicas: two replicas on one Redis. A key made through one
// works on the other at once; revoked through that other, it is refused
// by both from the next request, and the dashboard session it signed in
// on the first ends.
func TestAPIKeysReplicas(t *testing.T) {
	r := startRedisReplicas(t, 2, "Acme", "")
	a, b := r[0], r[1]
	made := a.createKey(t, testAPIKey, "")
	key := made["key"].(string)
	require.Equal(t, http.StatusOK, b.keyStatus(t, key), "a key made on A, on B")
	d := newDashClient(t, a.ts.URL)
	require.Equal(t, http.StatusOK, d.signIn(testStoreID, key).status, "dashboard sign-in on A with the key")

	status, body := b.apiCallTo(t, "DELETE", keysPath+"/"+made["id"].(string), testAPIKey, "", "")
	require.Equal(t, http.StatusNoContent, status, "DELETE on B: %v", body)
	for name, ta := range map[string]*testApp{"A": a, "B": b} {
		if got := ta.keyStatus(t, key); got != http.StatusUnauthorized {
			t.Errorf("the revoked key on %s = %d; want 401", name, got)
		}
	}
	assert.Contains(t, d.get("/dashboard/settings").body, `action="/dashboard/sign-in"`, "A's dashboard session of the key revoked on B")
}
