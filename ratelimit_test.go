package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

func TestKeyGuard(t *testing.T) {
	g := newKeyGuard(3, time.Second)
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	noClock := func() time.Time { t.Fatal("blocked read the clock while nobody had failed"); return now }
	blocked, wait := g.blocked("a", noClock)
	require.False(t, blocked, "before any failure")
	for i := range 3 {
		blocked, _ = g.blocked("a", clock)
		require.False(t, blocked, "before failure %d", i+1)
		g.failed("a", now)
	}
	blocked, wait = g.blocked("a", clock)
	require.True(t, blocked, "after the burst")
	assert.Equal(t, time.Second, wait)
	blocked, _ = g.blocked("b", clock)
	assert.False(t, blocked, "another client is not affected")

	now = now.Add(time.Second) // one failure refilled
	blocked, _ = g.blocked("a", clock)
	assert.False(t, blocked, "a second later")
	g.failed("a", now)
	blocked, _ = g.blocked("a", clock)
	assert.True(t, blocked)

	g.sweep(now.Add(10 * time.Second))
	assert.Empty(t, g.clients, "full budgets are forgotten")
	assert.Zero(t, g.failing.Load(), "failing once every budget is full again")
	blocked, _ = g.blocked("a", noClock)
	assert.False(t, blocked, "after the sweep")
}

// TestWrongKeysRateLimited checks the 429 of API.md §3 through the mux:
// after a burst of wrong keys a client gets 429 rate_limited with
// Retry-After, even with the right key, while a good client never does.
func TestWrongKeysRateLimited(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	a.srv.keys = newKeyGuard(5, time.Hour) // no refill during the test
	register := func(key string) response {
		return postJSON(t, registerURL(ts, storeA), key, registration(newAuthCode(t), oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())))
	}
	for range 5 {
		requireAPIError(t, register("wrong-key"), http.StatusUnauthorized, "unauthorized")
	}
	r := register("wrong-key")
	requireAPIError(t, r, http.StatusTooManyRequests, "rate_limited")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	assert.Positive(t, ra)
	requireAPIError(t, register(keyA), http.StatusTooManyRequests, "rate_limited")

	a.srv.keys = newKeyGuard(5, time.Hour)
	for range 20 {
		require.Equal(t, http.StatusOK, register(keyA).status, "a client with the right key is never limited")
	}
}
