package main

import (
	"context"
	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"
)

// registerAt registers a fresh code for store with key.
func registerAt(t *testing.T, base, store, key string) response {
	t.Helper()
	return postJSON(t, base+"/stores/"+store+"/auth/auth-code", key, registration(newAuthCode(t), oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())))
}

// requireRetryAfter checks that r has a Retry-After of whole seconds, at
// least one.
func requireRetryAfter(t *testing.T, r response) {
	t.Helper()
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	assert.Positive(t, ra, "Retry-After")
}

// TestKeyBudget: each API key has its own bucket; past it, that key's
// requests (any API-key endpoint) answer 429 rate_limited with
// Retry-After, while the store's other key and another store are served.
func TestKeyBudget(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	// A bucket of 5 that refills so slowly that the test never sees it.
	a.srv.cfg.Fairness.KeyRate, a.srv.cfg.Fairness.KeyBurst = 0.001, 5
	for i := range 5 {
		require.Equal(t, http.StatusOK, registerAt(t, ts.URL, storeA, keyA).status, "request %d of the burst", i+1)
	}
	for _, r := range []response{
		registerAt(t, ts.URL, storeA, keyA),
		call(t, http.MethodGet, ts.URL+"/stores/"+storeA+"/webhooks", nil, "X-API-Key", keyA),
	} {
		requireAPIError(t, r, http.StatusTooManyRequests, "rate_limited")
		requireRetryAfter(t, r)
	}
	require.Equal(t, http.StatusOK, registerAt(t, ts.URL, storeA, keyAHashed).status, "the store's other key")
	require.Equal(t, http.StatusOK, registerAt(t, ts.URL, storeB, keyB).status, "another store")
	requireAPIError(t, registerAt(t, ts.URL, storeA, "wrong"), http.StatusUnauthorized, "unauthorized")
}

// TestStoreShare: a store's sign-ins hold at most its share of live
// entries (a code one, a session two), by default max_live_entries over
// the number of stores; past it, its registrations answer 503 with
// Retry-After (a conflict still 409), while the other store registers as
// before, and once its codes expire it registers again.
func TestStoreShare(t *testing.T) {
	a, ts := startService(t, cfgOpts{maxLive: 60}) // two stores: 30 each
	require.Equal(t, 30, a.srv.cfg.StoreShare())
	for range 4 { // 4 codes and 4 sessions: 12
		requireToken(t, postForm(t, tokenURL(ts, storeA), mustRegister(t, ts, storeA, keyA).form()))
	}
	var code string
	for i := range 18 {
		code = newAuthCode(t)
		r := postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge))
		require.Equal(t, http.StatusOK, r.status, "code %d: %s", i+1, r.body)
	}
	r := registerAt(t, ts.URL, storeA, keyA)
	requireAPIError(t, r, http.StatusServiceUnavailable, "unavailable")
	requireRetryAfter(t, r)
	requireAPIError(t, postJSON(t, registerURL(ts, storeA), keyA, registration(code, rfc7636Challenge)), http.StatusConflict, "auth_code_conflict")
	for i := range 10 {
		require.Equal(t, http.StatusOK, registerAt(t, ts.URL, storeB, keyB).status, "store B's code %d", i+1)
	}
	// Past auth_code_ttl, 8 entries of 4 sessions are left. (Not up to the
	// share again: expired entries not yet swept still fill the store's
	// own cap of 60.)
	advance(a, 6*time.Minute)
	for i := range 10 {
		require.Equal(t, http.StatusOK, registerAt(t, ts.URL, storeA, keyA).status, "store A once its codes expired, code %d", i+1)
	}

	a.srv.cfg.Fairness.StoreMaxLiveEntries = 25 // configured rather than the share
	assert.Equal(t, 25, a.srv.cfg.StoreShare())
}

// TestFairnessAcrossReplicas: two servers on one store share the counts:
// each sees the other's part once it is older than tallyEvery.
func TestFairnessAcrossReplicas(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cfg, err := ParseConfig([]byte(testConfig(cfgOpts{})))
	require.NoError(t, err)
	cfg.Fairness.KeyRate, cfg.Fairness.KeyBurst = 0.001, 10
	now := time.Now()
	clock := func() time.Time { return now }
	var srvs [2]*server
	for i := range srvs {
		srvs[i] = newServer(cfg, st, make([]byte, 32), newLogger(io.Discard))
		srvs[i].now = clock
	}
	sc := cfg.Store(storeA)
	ctx := context.Background()
	for i := range 5 {
		require.Nil(t, srvs[0].overKeyBudget(ctx, sc, srvs[0].views.of(sc.ID).configKey(0)), "replica 0, request %d", i+1)
		require.Nil(t, srvs[1].overKeyBudget(ctx, sc, srvs[1].views.of(sc.ID).configKey(0)), "replica 1, request %d", i+1)
	}
	now = now.Add(tallyEvery)
	// Each has written its part by now, or writes it with this request.
	srvs[0].overKeyBudget(ctx, sc, srvs[0].views.of(sc.ID).configKey(0))
	srvs[1].overKeyBudget(ctx, sc, srvs[1].views.of(sc.ID).configKey(0))
	now = now.Add(tallyEvery)
	e := srvs[0].overKeyBudget(ctx, sc, srvs[0].views.of(sc.ID).configKey(0))
	require.NotNil(t, e, "replica 0 after 10 requests over both")
	assert.Equal(t, http.StatusTooManyRequests, e.Status)
	require.NotNil(t, srvs[1].overKeyBudget(ctx, sc, srvs[1].views.of(sc.ID).configKey(0)), "replica 1 after 10 requests over both")
}

// TestStoreShareDashboardSessions: a dashboard session counts in its
// store's share as a sign-in's entries do: past the share, signing in to
// that store's dashboard answers 503 with Retry-After, and so do its
// registrations, while the other store signs in and registers as before.
func TestStoreShareDashboardSessions(t *testing.T) {
	a, ts := startService(t, cfgOpts{maxLive: 10}) // two stores: 5 each
	require.Equal(t, 5, a.srv.cfg.StoreShare())
	for i := range 5 {
		p := newDashClient(t, ts.URL).signIn(storeA, keyA)
		require.Equal(t, http.StatusOK, p.status, "dashboard sign-in %d of store A", i+1)
	}
	p := newDashClient(t, ts.URL).signIn(storeA, keyA)
	assert.Equal(t, http.StatusServiceUnavailable, p.status, "a sixth dashboard sign-in of store A")
	assert.Contains(t, p.body, "as many sign-ins and sessions as it may")
	requireAPIError(t, registerAt(t, ts.URL, storeA, keyA), http.StatusServiceUnavailable, "unavailable")
	assert.Equal(t, http.StatusOK, newDashClient(t, ts.URL).signIn(storeB, keyB).status, "store B's dashboard sign-in")
	rb := registerAt(t, ts.URL, storeB, keyB)
	assert.Equal(t, http.StatusOK, rb.status, "store B's registration: body %s", rb.body)
}

// addTimesOut is a store whose first Add is made but answered
// ErrUnavailable, as when the answer times out.
type addTimesOut struct {
	store.Store
	once sync.Once
}

func (s *addTimesOut) Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error) {
	n, err := s.Store.Add(ctx, key, delta, exp)
	s.once.Do(func() { err = fmt.Errorf("%w: i/o timeout", store.ErrUnavailable) })
	return n, err
}

// TestTallyNotAddedTwice: a count whose Add failed is not sent again, as
// the store may have made it all the same (an answer that timed out): a
// guard that counts a request twice refuses another's.
func TestTallyNotAddedTwice(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	ts := &tallies{st: &addTimesOut{Store: st}, m: map[tallyID]*tally{}}
	id, exp := tallyID{kind: "key:", store: "s", n: 1}, time.Now().Add(time.Hour)
	now := time.Now().UnixNano()
	ts.add(t.Context(), id, 1, exp, now)                            // counted here
	ts.add(t.Context(), id, 0, exp, now+int64(tallyEvery))          // sent: made, answered "unavailable"
	got := ts.add(t.Context(), id, 0, exp, now+2*int64(tallyEvery)) // read back
	v, err := st.Get(t.Context(), id.key())
	require.NoError(t, err)
	assert.Equal(t, "1", string(v), "the store's count of one request")
	assert.Equal(t, int64(1), got, "the tally's")
}
