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
