//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store/redisstore/redistest"
)

func init() {
	ctRedis = func(t *testing.T) string { return redistest.New(t, redistest.Persistent...).URL() }
}

// ctRedisOpts are the options of a replica on rd, all under one prefix.
func ctRedisOpts(rd *redistest.Server) ctOpts {
	return ctOpts{redisURL: rd.URL(), redisPrefix: "replicas:"}
}

// TestReplicas runs the native binary as two replicas on one Redis
// (API.md §9), each its own process with its own data_dir, and the edge
// host as a third, and checks
// that the sign-in state is shared: a code registered on one redeems on
// the other, exactly once however the redemptions race, and a replay on
// either revokes the token. Then Redis stops: what needs state answers
// 503 with Retry-After, /readyz 503, a replica started meanwhile waits
// for it (or exits 0 on SIGTERM); and once Redis is back every replica
// serves again by itself.
func TestReplicas(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	rd := redistest.New(t, redistest.Persistent...)
	a := startContractService(t, targetNative, ctRedisOpts(rd))
	bo := ctRedisOpts(rd)
	bo.publicBaseURL = a.URL // as behind a load balancer: one public name
	b := startContractService(t, targetNative, bo)
	// E is the edge host and its module on the same Redis: the same
	// state, served by the other build.
	eo := ctRedisOpts(rd)
	eo.publicBaseURL = a.URL
	e := startContractService(t, targetWasm, eo)
	replicas := map[string]*ctService{"A": a, "B": b, "E": e}

	var kept string // a token issued before Redis stops
	t.Run("registered on A redeems on B; on E, on A", func(t *testing.T) {
		c := a.mustRegister(t)
		kept = ctToken(t, b.redeem(t, ctStoreA, c))
		ctToken(t, a.redeem(t, ctStoreA, e.mustRegister(t)))
		for _, s := range replicas {
			ctStatus(t, s.me(t, ctStoreA, kept), http.StatusOK)
		}
		// Registered on A, it is taken on B too.
		ctError(t, b.register(t, c), http.StatusConflict, "auth_code_conflict")
	})

	t.Run("metrics leave out the store counts", func(t *testing.T) {
		// Counting a prefix's keys would scan all of Redis at each scrape.
		r := a.do(t, http.MethodGet, "/metrics", nil)
		require.Equal(t, http.StatusOK, r.status)
		for _, name := range []string{"auth_codes_live", "auth_store_entries"} {
			assert.NotContains(t, string(r.body), name+" ", "/metrics on Redis")
		}
		assert.Contains(t, string(r.body), "http_requests_total{", "/metrics on Redis")
	})

	t.Run("a link begun on A completes on B", func(t *testing.T) {
		// The link cookie is signed by A with the key both read from
		// Redis; the code the game app registered on A is redeemed by B.
		cookie, callback := a.linkToCallback(t, "/account")
		r := b.do(t, http.MethodGet, strings.Replace(callback, a.URL, b.URL, 1), nil, "Cookie", cookie)
		require.Equal(t, http.StatusFound, r.status, "callback on B: %s", r.body)
		assert.Equal(t, "/account", r.header.Get("Location"))
		session := ctCookieHeader(r)
		require.NotEmpty(t, session, "a session cookie")
		ctStatus(t, a.do(t, http.MethodGet, "/stores/"+ctStoreA+"/auth/me", nil, "Cookie", session), http.StatusOK)
	})

	t.Run("50 redemptions over all three give one token", func(t *testing.T) {
		c := a.mustRegister(t)
		const n = 50
		statuses := map[string]int{}
		var (
			mu     sync.Mutex
			tokens []string
			wg     sync.WaitGroup
			start  = make(chan struct{})
		)
		for i := range n {
			s := []*ctService{a, b, e}[i%3]
			wg.Go(func() {
				<-start
				r, err := s.send(http.MethodPost, "/stores/"+ctStoreA+"/auth/token", c.tokenForm(),
					"Content-Type", "application/x-www-form-urlencoded")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					statuses[err.Error()]++
					return
				}
				var body struct {
					AccessToken string `json:"access_token"`
					Error       string `json:"error"`
				}
				json.Unmarshal(r.body, &body)
				statuses[fmt.Sprint(r.status, " ", body.Error)]++
				if body.AccessToken != "" {
					tokens = append(tokens, body.AccessToken)
				}
			})
		}
		close(start)
		wg.Wait()
		want := map[string]int{"200 ": 1, "400 invalid_grant": n - 1}
		if !assert.Equal(t, want, statuses, "answers of %d redemptions of one code over A and B", n) {
			return
		}
		require.Len(t, tokens, 1)
		// Every redemption after the first is a replay (API.md §4.2), which
		// revokes the one token: dead on both, whatever the interleaving.
		for _, s := range replicas {
			ctError(t, s.me(t, ctStoreA, tokens[0]), http.StatusUnauthorized, "unauthorized")
		}
	})

	t.Run("a replay on B revokes A's token; on E, B's", func(t *testing.T) {
		c := a.mustRegister(t)
		tok := ctToken(t, a.redeem(t, ctStoreA, c))
		ctStatus(t, b.me(t, ctStoreA, tok), http.StatusOK)
		ctTokenError(t, b.redeem(t, ctStoreA, c), "invalid_grant")
		c2 := a.mustRegister(t)
		tok2 := ctToken(t, b.redeem(t, ctStoreA, c2))
		ctTokenError(t, e.redeem(t, ctStoreA, c2), "invalid_grant")
		for _, s := range replicas {
			ctError(t, s.me(t, ctStoreA, tok2), http.StatusUnauthorized, "unauthorized")
		}
		for _, s := range []*ctService{a, b} {
			ctError(t, s.me(t, ctStoreA, tok), http.StatusUnauthorized, "unauthorized")
		}
	})

	t.Run("signed out on E, refused on A and B", func(t *testing.T) {
		tok := ctToken(t, a.redeem(t, ctStoreA, b.mustRegister(t)))
		ctStatus(t, e.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/logout", nil, "Authorization", "Bearer "+tok), http.StatusNoContent)
		for _, s := range replicas {
			ctError(t, s.me(t, ctStoreA, tok), http.StatusUnauthorized, "unauthorized")
		}
	})

	t.Run("Redis stopped, then back", func(t *testing.T) {
		waiting := a.mustRegister(t) // redeemed once Redis is back: an outage uses no code up
		rd.Stop(t, syscall.SIGKILL)  // appendfsync always: nothing acknowledged is lost
		// A replica started while Redis is down listens, and waits for it.
		c := startContractService(t, targetNative, ctOpts{redisURL: rd.URL(), redisPrefix: "replicas:", noWait: true})
		replicas["C"] = c
		// So does an edge host: it answers "starting" until its first
		// instance can start.
		replicas["F"] = startContractService(t, targetWasm, ctOpts{redisURL: rd.URL(), redisPrefix: "replicas:", noWait: true})
		for name, s := range replicas {
			ctEventually(t, 30*time.Second, func() bool {
				r, err := s.send(http.MethodGet, "/readyz", nil)
				return err == nil && r.status == http.StatusServiceUnavailable
			}, "replica %s: /readyz never answered 503 with Redis down", name)
			ctStatus(t, s.do(t, http.MethodGet, "/healthz", nil), http.StatusOK)
			for _, tc := range []struct {
				what string
				do   func() ctResp
			}{
				{"/readyz", func() ctResp { return s.do(t, http.MethodGet, "/readyz", nil) }},
				{"register", func() ctResp { return s.register(t, newCTCode(ctStoreA, ctKeyA)) }},
				{"redeem", func() ctResp { return s.redeem(t, ctStoreA, waiting) }},
				{"me", func() ctResp { return s.me(t, ctStoreA, kept) }},
				{"list webhooks", func() ctResp { return s.do(t, http.MethodGet, ctHooks(""), nil, "X-API-Key", ctKeyA) }},
				{"publish", func() ctResp {
					return s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/events", map[string]any{
						"type": "order.status.updated", "data": map[string]any{"object": map[string]any{"id": "o1"}},
					}, "X-API-Key", ctKeyA)
				}},
			} {
				r := tc.do()
				if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
					t.Errorf("replica %s: %s with Redis down = %d (Retry-After %q) %s; want 503 with Retry-After",
						name, tc.what, r.status, r.header.Get("Retry-After"), r.body)
				}
			}
		}
		// A signal while it waits ends it as any stop does: exit 0.
		d := startContractService(t, targetNative, ctOpts{redisURL: rd.URL(), redisPrefix: "replicas:", noWait: true})
		ctEventually(t, 30*time.Second, func() bool {
			r, err := d.send(http.MethodGet, "/healthz", nil)
			return err == nil && r.status == http.StatusOK
		}, "replica D never listened while Redis was down")
		require.NoError(t, d.p.terminate(30*time.Second), "replica D, stopped while waiting for Redis")
		if err := rd.Start(); err != nil {
			t.Fatal(err)
		}
		for name, s := range replicas {
			require.NoError(t, s.p.waitReady(s.URL, time.Minute), "replica %s after Redis came back", name)
			ctStatus(t, s.me(t, ctStoreA, kept), http.StatusOK)
		}
		ctToken(t, c.redeem(t, ctStoreA, waiting))
		fresh := c.mustRegister(t)
		ctToken(t, a.redeem(t, ctStoreA, fresh))
	})
}

// TestRedisWebhookState: with one process on Redis, the webhook state is
// written to Redis as it is to the embedded store, and a restart reads
// it back from there: data_dir stays unused.
func TestRedisWebhookState(t *testing.T) {
	rd := redistest.New(t, redistest.Persistent...)
	s := startContractService(t, targetNative, ctRedisOpts(rd))
	rc := ctNewReceiverOK(t)
	ep, secret := s.createEndpoint(t, rc.URL)
	evt := s.publish(t, "order-1")
	ctEventually(t, 30*time.Second, func() bool {
		d := s.deliveries(t, ep)
		return len(d) == 1 && d[0]["status"] == "succeeded"
	}, "the delivery of %s never succeeded", evt)
	s.restart()
	r := s.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, "X-API-Key", ctKeyA)
	ctStatus(t, r, http.StatusOK)
	assert.Equal(t, secret, r.data(t)["secret"], "the endpoint's secret after a restart")
	d := s.deliveries(t, ep)
	if assert.Len(t, d, 1, "the delivery log after a restart") {
		assert.Equal(t, evt, d[0]["event_id"])
		assert.Equal(t, "succeeded", d[0]["status"])
	}
	data := filepath.Join(filepath.Dir(s.log), "data")
	if entries, err := os.ReadDir(data); err == nil && len(entries) > 0 {
		t.Errorf("data_dir %s holds %d entries on Redis; want none", data, len(entries))
	}
}

// TestReplicaOnRedisRestartedEmpty: a Redis that comes back without its
// data (no persistence configured) does not wedge a replica: it serves
// again by itself, a new code signs in, and a new endpoint gets its
// deliveries; what Redis lost is lost (the docs say which persistence
// settings keep it).
func TestReplicaOnRedisRestartedEmpty(t *testing.T) {
	rd := redistest.New(t) // no append-only file: a restart starts empty
	a := startContractService(t, targetNative, ctRedisOpts(rd))
	before := ctToken(t, a.redeem(t, ctStoreA, a.mustRegister(t)))

	rc := ctNewReceiverOK(t)
	lost, _ := a.createEndpoint(t, rc.URL)

	rd.Restart(t, syscall.SIGKILL)
	require.NoError(t, a.p.waitReady(a.URL, time.Minute), "the replica after Redis came back empty")
	ctStatus(t, a.me(t, ctStoreA, before), http.StatusUnauthorized) // its session went with Redis's data
	after := ctToken(t, a.redeem(t, ctStoreA, a.mustRegister(t)))
	ctStatus(t, a.me(t, ctStoreA, after), http.StatusOK)

	// The webhook state went too, and the replica knows it (it read the
	// state again); a new endpoint gets its deliveries (the sender's
	// lease, lost with the rest, taken again).
	ctStatus(t, a.do(t, http.MethodGet, ctHooks("/"+lost), nil, "X-API-Key", ctKeyA), http.StatusNotFound)
	ep, _ := a.createEndpoint(t, rc.URL)
	evt := a.publish(t, "order-after")
	ctEventually(t, 30*time.Second, func() bool {
		d := a.deliveries(t, ep)
		return len(d) == 1 && d[0]["event_id"] == evt && d[0]["status"] == "succeeded"
	}, "the delivery after Redis came back empty never succeeded")
}

// TestRedisStalled: a Redis that stops answering (SIGSTOP: its
// connections stay open, and nothing comes back) costs a webhook request
// at most storeDeadline and a little: a publish and a read answer 503
// with Retry-After, well within the client's 4 s; and they work again
// once Redis answers.
func TestRedisStalled(t *testing.T) {
	rd := redistest.New(t, redistest.Persistent...)
	c := whFast()
	c.DataDir = t.TempDir()
	cfg := whParseConfig(t, c)
	cfg.Storage.Backend, cfg.Storage.RedisURL, cfg.Storage.RedisPrefix = "redis", rd.URL(), "stall:"
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	require.NoError(t, err)
	w := &whApp{t: t, cfg: cfg, app: a, srv: httptest.NewServer(a.srv.handler())}
	t.Cleanup(w.close)
	ep, _ := w.whEndpoint(t, "https://hooks.example.com/")

	rd.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { rd.Signal(syscall.SIGCONT) }) // before the app's close, which needs Redis
	client := &http.Client{Timeout: 4 * time.Second}
	for _, tt := range []struct {
		name, method, path, body string
	}{
		{"publish", http.MethodPost, "/stores/" + whStoreA + "/events", `{"type":"order.status.updated","data":{"object":{"id":"o1","status":"pending"}}}`},
		{"list deliveries", http.MethodGet, whEndpointPath(whStoreA, ep) + "/deliveries", ""},
		{"create an endpoint", http.MethodPost, whHooksPath(whStoreA), `{"url":"https://hooks.example.com/2","events":["order.status.updated"]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, w.srv.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-API-Key", whKeyA)
			resp, err := client.Do(req)
			require.NoError(t, err, "no answer within the client's 4 s")
			resp.Body.Close()
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		})
	}
	rd.Signal(syscall.SIGCONT)
	require.Eventually(t, func() bool {
		r, err := w.try(whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries", key: whKeyA})
		return err == nil && r.status == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond, "reads answer again once Redis does")
}
