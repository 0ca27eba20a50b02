package main

import (
	"bytes"
	"context"
	"deeplink/internal/store/embedded"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
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
	assert.Zero(t, wait, "before any failure")
	for i := range 3 {
		blocked, _ = g.blocked("a", clock)
		require.False(t, blocked, "before failure %d", i+1)
		g.failed(context.Background(), "a", now)
	}
	blocked, wait = g.blocked("a", clock)
	require.True(t, blocked, "after the burst")
	assert.Equal(t, time.Second, wait)
	blocked, _ = g.blocked("b", clock)
	assert.False(t, blocked, "another client is not affected")

	now = now.Add(time.Second) // one failure refilled
	blocked, _ = g.blocked("a", clock)
	assert.False(t, blocked, "a second later")
	g.failed(context.Background(), "a", now)
	blocked, _ = g.blocked("a", clock)
	assert.True(t, blocked)

	g.sweep(now.Add(10 * time.Second))
	assert.Empty(t, g.clients, "full budgets are forgotten")
	assert.Zero(t, g.failing.Load(), "failing once every budget is full again")
	blocked, _ = g.blocked("a", noClock)
	assert.False(t, blocked, "after the sweep")
}

// TestWrongKeysRateLimited checks the 429 of API.md §3 through the mux:
// after a burst of wrong keys for a store, a client address gets 429
// rate_limited with Retry-After for that store, even with its right key
// (else the guesser would learn which guess is right), while another
// store's right key from the same address, and a good client, never do.
func TestWrongKeysRateLimited(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	limitGuard(a.srv.keys, 5) // no refill during the test
	register := func(store, key string) response {
		return postJSON(t, registerURL(ts, store), key, registration(newAuthCode(t), oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())))
	}
	for range 5 {
		requireAPIError(t, register(storeA, "wrong-key"), http.StatusUnauthorized, "unauthorized")
	}
	r := register(storeA, "wrong-key")
	requireAPIError(t, r, http.StatusTooManyRequests, "rate_limited")
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	assert.Positive(t, ra)
	requireAPIError(t, register(storeA, keyA), http.StatusTooManyRequests, "rate_limited")
	// The guesser's store only: another studio at the same address is served.
	require.Equal(t, http.StatusOK, register(storeB, keyB).status, "the right key of another store from the guesser's address")
	requireAPIError(t, register(storeB, "wrong-key"), http.StatusUnauthorized, "unauthorized")

	limitGuard(a.srv.keys, 5)
	for range 20 {
		require.Equal(t, http.StatusOK, register(storeA, keyA).status, "a client with the right key is never limited")
	}
}

// limitGuard gives g, which a running server uses, a budget of burst
// failures refilled once an hour, and forgets what clients spent. It
// writes under g's lock: the server's tick sweeps g meanwhile.
func limitGuard(g *keyGuard, burst int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.burst, g.interval = float64(burst), time.Hour
	clear(g.clients)
	g.failing.Store(0)
}

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	tests := []struct {
		name, peer string
		forwarded  []string // X-Forwarded-For lines
		want       string
	}{
		{"direct client", "203.0.113.7:5000", nil, "203.0.113.7"},
		{"direct client naming another", "203.0.113.7:5000", []string{"198.51.100.9"}, "203.0.113.7"},
		{"proxy without the header", "127.0.0.1:5000", nil, "127.0.0.1"},
		{"proxy naming the client", "127.0.0.1:5000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"two proxies", "127.0.0.1:5000", []string{"198.51.100.9, 10.1.2.3"}, "198.51.100.9"},
		{"forged first hop", "127.0.0.1:5000", []string{"192.0.2.1, 198.51.100.9"}, "198.51.100.9"},
		{"hops over two lines", "127.0.0.1:5000", []string{"192.0.2.1", "198.51.100.9, 10.1.2.3"}, "198.51.100.9"},
		{"only proxies", "127.0.0.1:5000", []string{"10.9.9.9, 10.1.2.3"}, "10.9.9.9"},
		{"garbage after a proxy", "127.0.0.1:5000", []string{"not-an-ip, 10.1.2.3"}, "10.1.2.3"},
		{"garbage", "127.0.0.1:5000", []string{"not-an-ip"}, "127.0.0.1"},
		{"IPv6 proxy and client", "[::1]:5000", []string{"2001:db8::7"}, "2001:db8::/64"},
		{"direct IPv6 client", "[2001:db8:0:1:aaaa::7]:5000", nil, "2001:db8:0:1::/64"},
		{"proxy alone, IPv6", "[::1]:5000", nil, "::/64"},
		{"IPv4-mapped client", "127.0.0.1:5000", []string{"::ffff:198.51.100.9"}, "198.51.100.9"},
		{"client with a port", "127.0.0.1:5000", []string{"198.51.100.9:5678"}, "198.51.100.9"},
		{"IPv6 client in brackets", "127.0.0.1:5000", []string{"[2001:db8::7]"}, "2001:db8::/64"},
		{"IPv6 client with a port", "127.0.0.1:5000", []string{"[2001:db8::7]:443"}, "2001:db8::/64"},
		{"quoted client", "127.0.0.1:5000", []string{`"198.51.100.9"`}, "198.51.100.9"},
		{"empty hops", "127.0.0.1:5000", []string{"192.0.2.1, 198.51.100.9, , 10.1.2.3,"}, "198.51.100.9"},
		{"IPv4-mapped proxy", "[::ffff:127.0.0.1]:5000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"peer without a port", "127.0.0.1", []string{"198.51.100.9"}, "198.51.100.9"},
		{"no proxies trusted", "127.0.0.1:5000", []string{"198.51.100.9"}, "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", nil)
			r.RemoteAddr = tt.peer
			for _, f := range tt.forwarded {
				r.Header.Add("X-Forwarded-For", f)
			}
			tr := trusted
			if tt.name == "no proxies trusted" {
				tr = nil
			}
			if got := clientAddr(r, tr); got != tt.want {
				t.Errorf("clientAddr(%s, X-Forwarded-For %q) = %q; want %q", tt.peer, tt.forwarded, got, tt.want)
			}
		})
	}
}

// TestWrongKeysBehindProxy: behind a trusted proxy, the guard counts each
// client the proxy names, so one guessing keys does not lock out the
// others; behind one not trusted, they share its budget.
func TestWrongKeysBehindProxy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		player  int // the other client's status, once the guesser is limited
	}{
		{"proxy trusted", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, http.StatusOK},
		// The default trusts no proxy: the header could be the client's own.
		{"no proxy trusted", nil, http.StatusTooManyRequests},
	} {
		t.Run(tt.name, func(t *testing.T) { testWrongKeysBehindProxy(t, tt.trusted, tt.player) })
	}
}

func testWrongKeysBehindProxy(t *testing.T, trusted []netip.Prefix, player int) {
	a, ts := startService(t, cfgOpts{}) // the test server's peer is 127.0.0.1
	limitGuard(a.srv.keys, 5)
	a.srv.cfg.SetProxies(trusted) // before any request
	register := func(key, client string) response {
		body, err := json.Marshal(registration(newAuthCode(t), oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())))
		require.NoError(t, err)
		return call(t, http.MethodPost, registerURL(ts, storeA), bytes.NewReader(body),
			"X-API-Key", key, "Content-Type", "application/json", "X-Forwarded-For", client)
	}
	const guesser, other = "203.0.113.7", "198.51.100.9"
	for range 5 {
		requireAPIError(t, register("wrong-key", guesser), http.StatusUnauthorized, "unauthorized")
	}
	requireAPIError(t, register(keyA, guesser), http.StatusTooManyRequests, "rate_limited")
	assert.Equal(t, player, register(keyA, other).status, "another client behind the same proxy")
}

// TestFailedRedemptionsRateLimited: past a budget of failed redemptions
// (invalid_grant), a client address gets 429 rate_limited with
// Retry-After for any redemption that would fail, and the code it named is
// not used up; a redemption that succeeds is never held up, a replay still
// revokes, and another address is not affected.
func TestFailedRedemptionsRateLimited(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	limitGuard(a.srv.grants, 5) // no refill during the test
	a.srv.cfg.SetProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	const guesser, other = "203.0.113.7", "198.51.100.9"
	redeem := func(v url.Values, client string) response {
		return postForm(t, tokenURL(ts, storeA), v, "X-Forwarded-For", client)
	}
	unknown := func() url.Values {
		return registered{code: newAuthCode(t), verifier: oauth2.GenerateVerifier(), redirectURI: shopCB}.form()
	}
	live, next := mustRegister(t, ts, storeA, keyA), mustRegister(t, ts, storeA, keyA)
	for range 5 {
		requireTokenError(t, redeem(unknown(), guesser), "invalid_grant")
	}

	r := redeem(unknown(), guesser)
	require.Equal(t, http.StatusTooManyRequests, r.status, "after the budget: %s", r.body)
	var e tokenErrorBody
	require.NoError(t, json.Unmarshal(r.body, &e), "body %s", r.body)
	assert.Equal(t, "rate_limited", e.Error, "body %s", r.body)
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	assert.Positive(t, ra)

	wrong := live.form()
	wrong.Set("code_verifier", oauth2.GenerateVerifier())
	assert.Equal(t, http.StatusTooManyRequests, redeem(wrong, guesser).status, "a wrong verifier for a live code")
	tok := requireToken(t, redeem(live.form(), guesser)) // the wrong verifier did not use it up
	nextTok := requireToken(t, redeem(next.form(), guesser))
	requireTokenError(t, redeem(live.form(), guesser), "invalid_grant") // a replay: revokes
	assert.Equal(t, http.StatusUnauthorized, me(t, ts, storeA, tok.AccessToken).status, "the token after the replay")
	requireTokenError(t, redeem(unknown(), other), "invalid_grant")
	for range 20 {
		requireToken(t, redeem(mustRegister(t, ts, storeA, keyA).form(), other))
	}

	// A replay however late, past the code's own life, still revokes.
	advance(a, a.srv.cfg.AuthCodeTTL.D()+redeemGrace+time.Second)
	require.Equal(t, http.StatusOK, me(t, ts, storeA, nextTok.AccessToken).status, "the token, before the late replay")
	requireTokenError(t, redeem(next.form(), guesser), "invalid_grant")
	assert.Equal(t, http.StatusUnauthorized, me(t, ts, storeA, nextTok.AccessToken).status, "the token after the late replay")
}

// TestKeyGuardAcrossReplicas: two servers on one store (replicas, or the
// edge host's instances) share the failed-key guard's verdict: a client
// blocked on A, after its burst of wrong keys there, gets one more wrong
// key on B (which has not seen it fail yet), then 429 on B too, its right
// key included, while another client is served on both.
func TestKeyGuardAcrossReplicas(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cfg, err := ParseConfig([]byte(testConfig(cfgOpts{})))
	require.NoError(t, err)
	var urls [2]string
	for i := range urls {
		ts := httptest.NewServer(newServer(cfg, st, make([]byte, 32), newLogger(io.Discard)).handler())
		t.Cleanup(ts.Close)
		urls[i] = ts.URL
	}
	a, b := urls[0], urls[1]
	for range keyFailBurst {
		requireAPIError(t, registerAt(t, a, storeA, "ak_wrong"), http.StatusUnauthorized, "unauthorized")
	}
	requireAPIError(t, registerAt(t, a, storeA, "ak_wrong"), http.StatusTooManyRequests, "rate_limited")
	requireAPIError(t, registerAt(t, b, storeA, "ak_wrong"), http.StatusUnauthorized, "unauthorized")
	for _, key := range []string{"ak_wrong", keyA} {
		r := registerAt(t, b, storeA, key)
		requireAPIError(t, r, http.StatusTooManyRequests, "rate_limited")
		requireRetryAfter(t, r)
	}
	// Another store's budget, at the same address, is its own.
	for _, u := range urls {
		require.Equal(t, http.StatusOK, registerAt(t, u, storeB, keyB).status, "store B at %s", u)
	}
}

// TestCallbackWithinTheRedemptionBudget: the browser's callback redeems
// within the address's budget of failed redemptions, as the token
// endpoint does, and shares it: its failures count, and past the budget
// one that would fail is refused (400 page, Retry-After) without using up
// the code it names. A link cookie sent again and again is no way round
// the budget.
func TestCallbackWithinTheRedemptionBudget(t *testing.T) {
	f := startFlow(t)
	limitGuard(f.app.srv.grants, 3) // no refill during the test
	mine, myCallback := f.startLink(t, "/account")
	theirs, theirCallback := f.startLink(t, "/account") // another player's sign-in, under way
	with := func(code string) string {
		u, err := url.Parse(myCallback)
		require.NoError(t, err)
		q := u.Query()
		q.Set("code", code)
		u.RawQuery = q.Encode()
		return u.String()
	}
	for range 3 {
		r := f.get(t, with(newAuthCode(t)), mine...)
		require.Equal(t, http.StatusBadRequest, r.status, "a guessed code: %s", r.body)
	}
	u, err := url.Parse(theirCallback)
	require.NoError(t, err)
	r := f.get(t, with(u.Query().Get("code")), mine...)
	assert.Equal(t, http.StatusBadRequest, r.status, "their code, with my cookie, past the budget")
	assert.NotEmpty(t, r.header.Get("Retry-After"), "past the budget")
	assert.Contains(t, string(r.body), "too many failed redemptions")

	form := registered{code: newAuthCode(t), verifier: oauth2.GenerateVerifier(), redirectURI: shopCB}.form()
	req, err := http.NewRequest(http.MethodPost, f.svc.URL+"/stores/"+storeA+"/auth/token", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	assert.Equal(t, http.StatusTooManyRequests, send(t, f.svc.Client(), req).status, "the token endpoint, from the same address: one budget")

	r = f.get(t, theirCallback, theirs...)
	assert.Equal(t, http.StatusFound, r.status, "their sign-in, whose code the guess did not use up: %s", r.body)
}
