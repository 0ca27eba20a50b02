package main

// TestCrash holds the service to what API.md §6 promises of kill -9 with
// the embedded store's default durability: nothing acknowledged with a
// 2xx is lost. It runs the native binary (or, with -target=wasm, the edge
// host and its module, as TestContract does) under concurrent load, kills it
// with SIGKILL at a moment drawn from a seeded generator, starts it again
// on the same data_dir, and checks what the answers received before the
// kill promised, round after round:
//
//   - a code whose registration was answered 200 redeems exactly once;
//   - a code whose redemption was answered stays used up (a replay is
//     invalid_grant), and the token it issued signs in until a replay
//     revokes it, after which it stays revoked;
//   - an endpoint created, changed or deleted with a 2xx is in that state;
//   - an event answered 202 reaches the receiver at least once (more
//     than once when the kill cut a delivery under way: duplicates are
//     counted and logged, not failed).
//
// A request the kill cut (no answer, or part of one) is an unknown
// outcome, held to what either outcome allows: a registration cut may or
// may not have left a live code, a redemption cut may or may not have used
// it up, but no code ever redeems twice; an endpoint change cut may or may
// not have been made.

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var crashSeedFlag = flag.Uint64("crash-seed", 0, "seed of TestCrash's choices, kill moments included (default: from the clock)")

const (
	crashRounds  = 20
	crashWorkers = 6                      // goroutines registering, redeeming, checking tokens, publishing
	crashLoadMin = 300 * time.Millisecond // a round's load lasts from this
	crashLoadMax = 600 * time.Millisecond // to this before the kill
	crashShown   = 5                      // failures of one kind written out; the rest are counted
	// crashReceiverHold is how long the merchant's endpoint takes to
	// answer a delivery it has recorded: deliveries are under way at the
	// kill, and others wait behind them.
	crashReceiverHold = 5 * time.Millisecond
	// crashDeliveryWait is how long the wait at the end for the events
	// still on their way goes on without a delivery arriving.
	crashDeliveryWait = 5 * time.Second
)

// crashCode is a registration and what the answers received say of it.
type crashCode struct {
	ctCode
	acked    int    // round whose load had the registration answered 200; -1: never answered
	redeemed int    // round its redemption was answered 200 in; -1: none was
	token    string // the token that redemption issued
	revoked  int    // round a replay was answered invalid_grant in, revoking token; -1: none was
	cutAt    int    // round the kill cut a replay in; 0: none
}

// crashEP is an endpoint's state as the test set it.
type crashEP struct {
	URL, Description string
	Enabled          bool
	Gone             bool // deleted
}

func (e crashEP) String() string {
	if e.Gone {
		return "deleted"
	}
	return fmt.Sprintf("{url %s, description %q, enabled %t}", e.URL, e.Description, e.Enabled)
}

// crashEndpoint is an endpoint the test made.
type crashEndpoint struct {
	id    string
	want  crashEP  // the state last acknowledged
	at    int      // the round want was acknowledged in (0: before the first)
	maybe *crashEP // the state a change the kill cut asked for, or nil
}

// crashRun is the state of one TestCrash.
type crashRun struct {
	t        *testing.T
	s        *ctService
	rc       *ctReceiver
	seed     uint64
	round    int           // the round under way, from 1; main goroutine writes it between rounds
	starting time.Duration // spent waiting for the restarts to be ready
	killed   atomic.Bool   // the kill of this round was sent: errors from now on are its doing

	mu        sync.Mutex
	live      []*crashCode // registration acknowledged, not redeemed
	fresh     []*crashCode // redeemed since the last kill: its token not checked after one yet
	consumed  []*crashCode // redeemed, its token checked after a kill
	revoked   []*crashCode // replayed: invalid_grant answered, token revoked
	unknown   []*crashCode // a registration or redemption the kill cut
	replayCut []*crashCode // redeemed; a replay the kill cut, so its token may be revoked or not
	events    map[string]int
	failures  map[string]int

	// Figures, for the log.
	n struct {
		registered, regCut, regKept        atomic.Int64
		redeemed, redeemCut, redeemKept    atomic.Int64
		replays, replayCut, meChecks       atomic.Int64
		publishCut                         atomic.Int64
		endpointChanges, endpointCut       atomic.Int64
		endpointCutKept, endpointCutUndone atomic.Int64
	}

	// The endpoint churner's, and between rounds the main goroutine's.
	endpoints  []*crashEndpoint
	cutCreates []crashEP // creations the kill cut: each may be there or not
	churnN     int
}

func TestCrash(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	seed := *crashSeedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: go test -run TestCrash -crash-seed=%d .", seed, seed)
		}
	})
	start := time.Now()
	s := startContractService(t, contractTarget(t), ctOpts{
		retry:    []string{"50ms", "100ms", "200ms", "400ms", "800ms", "1s", "1s"},
		loadTest: true,
	})
	s.client.Transport = &http.Transport{MaxIdleConnsPerHost: crashWorkers + 2}
	rc := &ctReceiver{status: ctAlways(http.StatusOK), t: t}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.ServeHTTP(w, r) // recorded; the answer goes out once this returns
		<-time.After(crashReceiverHold)
	}))
	t.Cleanup(rc.Close)
	cr := &crashRun{t: t, s: s, rc: rc, seed: seed, events: map[string]int{}, failures: map[string]int{}}

	// The endpoint that receives the events, written by a graceful stop:
	// the rounds start from a known state.
	mainURL := cr.rc.URL + "/main"
	mainID, secret := s.createEndpoint(t, mainURL)
	cr.endpoints = append(cr.endpoints, &crashEndpoint{id: mainID,
		want: crashEP{URL: mainURL, Description: "orders", Enabled: true}})
	s.restart()

	rng := mrand.New(mrand.NewPCG(seed, 0))
	for cr.round = 1; cr.round <= crashRounds; cr.round++ {
		cr.load(crashLoadMin + time.Duration(rng.Int64N(int64(crashLoadMax-crashLoadMin)+1)))
		cr.verifyAfterKill()
	}
	cr.verifyAll()
	cr.verifyDelivered(mainID, secret)
	cr.reportCounts()
	t.Logf("seed %d, %d rounds in %v, %v of it restarting", seed, crashRounds,
		time.Since(start).Round(time.Millisecond), cr.starting.Round(time.Millisecond))
}

// fail reports a failure of kind, writing out the first crashShown.
func (cr *crashRun) fail(kind, format string, args ...any) {
	cr.mu.Lock()
	cr.failures[kind]++
	n := cr.failures[kind]
	cr.mu.Unlock()
	if n <= crashShown {
		cr.t.Errorf(format, args...)
	}
}

// cut records an error sending a request or reading its answer: the
// kill's doing once it was sent, a failure before.
func (cr *crashRun) cut(what string, err error) {
	if !cr.killed.Load() {
		cr.fail("request failed before the kill", "%s at round %d, before the kill: %v", what, cr.round, err)
	}
}

func (cr *crashRun) reportCounts() {
	for _, kind := range slices.Sorted(func(yield func(string) bool) {
		for k := range cr.failures {
			if !yield(k) {
				return
			}
		}
	}) {
		cr.t.Errorf("%s: %d in all (%d written out)", kind, cr.failures[kind], min(cr.failures[kind], crashShown))
	}
	n := &cr.n
	cr.t.Logf("registrations: %d answered 200, %d cut (%d of them kept)", n.registered.Load(), n.regCut.Load(), n.regKept.Load())
	cr.t.Logf("redemptions: %d answered 200, %d cut (%d of them not done, redeemed after the restart); replays: %d answered invalid_grant, %d cut; %d token checks",
		n.redeemed.Load(), n.redeemCut.Load(), n.redeemKept.Load(), n.replays.Load(), n.replayCut.Load(), n.meChecks.Load())
	cr.t.Logf("endpoint changes: %d acknowledged, %d cut (%d made, %d not)",
		n.endpointChanges.Load(), n.endpointCut.Load(), n.endpointCutKept.Load(), n.endpointCutUndone.Load())
}

// add appends c to pool under the lock.
func (cr *crashRun) add(pool *[]*crashCode, c *crashCode) {
	cr.mu.Lock()
	*pool = append(*pool, c)
	cr.mu.Unlock()
}

// take removes a random code from pool, or returns nil if it is empty.
func (cr *crashRun) take(rng *mrand.Rand, pool *[]*crashCode) *crashCode {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	p := *pool
	if len(p) == 0 {
		return nil
	}
	i := rng.IntN(len(p))
	c := p[i]
	p[i] = p[len(p)-1]
	*pool = p[:len(p)-1]
	return c
}

// ---- one round ----

// load runs the workers and the endpoint churner for d, kills the
// service with SIGKILL, waits for every request to end, and starts the
// service again on the same data_dir.
func (cr *crashRun) load(d time.Duration) {
	cr.t.Helper()
	cr.killed.Store(false)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range crashWorkers {
		rng := mrand.New(mrand.NewPCG(cr.seed, uint64(cr.round*100+i+1)))
		wg.Go(func() { cr.work(rng, stop) })
	}
	rng := mrand.New(mrand.NewPCG(cr.seed, uint64(cr.round*100)))
	wg.Go(func() { cr.churn(rng, stop) })

	kill := time.NewTimer(d) // the kill's moment, drawn by the caller
	<-kill.C
	cr.killed.Store(true)
	require.NoError(cr.t, cr.s.p.cmd.Process.Kill())
	close(stop)
	<-cr.s.p.exited
	wg.Wait()
	cr.s.client.CloseIdleConnections()
	t0 := time.Now()
	cr.s.start()
	cr.starting += time.Since(t0)
}

// work sends requests until stop, or until one fails (the kill).
func (cr *crashRun) work(rng *mrand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		var ok bool
		switch n := rng.IntN(100); {
		// Redemptions outnumber registrations, and replays nearly match
		// them, so that few codes are left for the end.
		case n < 25:
			ok = cr.register()
		case n < 55:
			ok = cr.redeemLive(rng)
		case n < 80:
			ok = cr.replay(rng)
		case n < 85:
			ok = cr.checkToken(rng)
		default:
			ok = cr.publish(rng)
		}
		if !ok {
			return
		}
	}
}

// register registers a new code. Each request function returns false
// when the request failed, so the worker stops.
func (cr *crashRun) register() bool {
	c := &crashCode{ctCode: newCTCode(ctStoreA, ctKeyA), acked: -1, redeemed: -1, revoked: -1}
	r, err := cr.s.send(http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", c.body(), "X-API-Key", ctKeyA)
	switch {
	case err != nil:
		cr.cut("registration", err)
		cr.n.regCut.Add(1)
		cr.add(&cr.unknown, c)
		return false
	case r.status == http.StatusOK:
		c.acked = cr.round
		cr.n.registered.Add(1)
		cr.add(&cr.live, c)
	default:
		cr.fail("unexpected answer", "registration at round %d: %d %s; want 200", cr.round, r.status, r.body)
	}
	return true
}

// redeemLive redeems a code whose registration was acknowledged: it must
// sign in, once.
func (cr *crashRun) redeemLive(rng *mrand.Rand) bool {
	c := cr.take(rng, &cr.live)
	if c == nil {
		return cr.register()
	}
	r, err := cr.redeem(c)
	switch {
	case err != nil:
		cr.cut("redemption", err)
		cr.n.redeemCut.Add(1)
		cr.add(&cr.unknown, c)
		return false
	case r.status == http.StatusOK:
		cr.issued(c, r, cr.round)
	case crashInvalidGrant(r):
		cr.fail("lost registration", "code %q acknowledged at round %d: redeemed at round %d: %s; want redeemable once",
			c.code, c.acked, cr.round, crashAnswer(r))
	default:
		cr.fail("unexpected answer", "code %q acknowledged at round %d: redeemed at round %d: %s; want 200",
			c.code, c.acked, cr.round, crashAnswer(r))
	}
	return true
}

// issued records the token r issued for c in round.
func (cr *crashRun) issued(c *crashCode, r ctResp, round int) {
	if !cr.token(c, r) {
		return
	}
	c.redeemed = round
	cr.n.redeemed.Add(1)
	cr.add(&cr.fresh, c)
}

// token sets c's token to the one r, a 200 of the token endpoint, issued.
func (cr *crashRun) token(c *crashCode, r ctResp) bool {
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if json.Unmarshal(r.body, &tok) != nil || tok.AccessToken == "" {
		cr.fail("unexpected answer", "redemption of %q at round %d: 200 %s; want an access_token", c.code, cr.round, r.body)
		return false
	}
	c.token = tok.AccessToken
	return true
}

// replay redeems again a code redeemed before a kill: invalid_grant, and
// its token revoked.
func (cr *crashRun) replay(rng *mrand.Rand) bool {
	c := cr.take(rng, &cr.consumed)
	if c == nil {
		return cr.register()
	}
	r, err := cr.redeem(c)
	switch {
	case err != nil:
		cr.cut("replay", err)
		cr.n.replayCut.Add(1)
		c.cutAt = cr.round
		cr.add(&cr.replayCut, c)
		return false
	case crashInvalidGrant(r):
		cr.n.replays.Add(1)
		c.revoked = cr.round
		cr.add(&cr.revoked, c)
	default:
		cr.fail("double redemption", "code %q redeemed at round %d: %s at round %d; want invalid_grant",
			c.code, c.redeemed, crashAnswer(r), cr.round)
	}
	return true
}

// checkToken signs in with the token of a code redeemed before a kill.
func (cr *crashRun) checkToken(rng *mrand.Rand) bool {
	c := cr.take(rng, &cr.consumed)
	if c == nil {
		return cr.register()
	}
	r, err := cr.me(c.token)
	switch {
	case err != nil:
		cr.cut("/me", err)
		cr.add(&cr.consumed, c) // reading changes nothing
		return false
	case r.status == http.StatusOK:
		cr.n.meChecks.Add(1)
		cr.add(&cr.consumed, c)
	default:
		cr.fail("lost token", "token of code %q issued at round %d: /me %d at round %d; want 200",
			c.code, c.redeemed, r.status, cr.round)
	}
	return true
}

// publish publishes an order.status.updated event.
func (cr *crashRun) publish(rng *mrand.Rand) bool {
	r, err := cr.s.send(http.MethodPost, "/stores/"+ctStoreA+"/events", map[string]any{
		"type": "order.status.updated",
		"data": map[string]any{"object": map[string]any{
			"id": fmt.Sprintf("order-%d-%d", cr.round, rng.Uint64()), "status": "completed"}},
	}, "X-API-Key", ctKeyA)
	switch {
	case err != nil:
		cr.cut("event", err)
		cr.n.publishCut.Add(1)
		return false
	case r.status == http.StatusAccepted:
		var v struct{ Data struct{ ID string } }
		if json.Unmarshal(r.body, &v) != nil || !strings.HasPrefix(v.Data.ID, "evt_") {
			cr.fail("unexpected answer", "event at round %d: 202 %s; want an evt_ id", cr.round, r.body)
			return true
		}
		cr.mu.Lock()
		cr.events[v.Data.ID] = cr.round
		cr.mu.Unlock()
	default:
		cr.fail("unexpected answer", "event at round %d: %d %s; want 202", cr.round, r.status, r.body)
	}
	return true
}

// redeem redeems c as a client of an address of c's own (through the
// loopback proxy the load test trusts): the test replays every code it
// redeems, far more failed redemptions than one webshop makes, and the
// guard of failed redemptions, whose verdict outlives a restart, is not
// what it tests.
func (cr *crashRun) redeem(c *crashCode) (ctResp, error) {
	sum := sha256.Sum256([]byte(c.code))
	return cr.s.send(http.MethodPost, "/stores/"+ctStoreA+"/auth/token", c.tokenForm(),
		"Content-Type", "application/x-www-form-urlencoded",
		"X-Forwarded-For", netip.AddrFrom4([4]byte{10, sum[0], sum[1], sum[2]}).String())
}

func (cr *crashRun) me(token string) (ctResp, error) {
	return cr.s.send(http.MethodGet, "/stores/"+ctStoreA+"/auth/me", nil, "Authorization", "Bearer "+token)
}

func crashInvalidGrant(r ctResp) bool {
	var e struct{ Error string }
	return r.status == http.StatusBadRequest && json.Unmarshal(r.body, &e) == nil && e.Error == "invalid_grant"
}

// crashAnswer is r for a failure message.
func crashAnswer(r ctResp) string {
	return strconv.Itoa(r.status) + " " + strings.TrimSpace(string(r.body))
}

// ---- webhook endpoints ----

// churn creates, changes and deletes endpoints subscribed to webhook.test
// alone (no test event is sent, so they receive nothing), one request at
// a time, until stop or a request fails (the kill). The endpoint that
// receives the events is left alone.
func (cr *crashRun) churn(rng *mrand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		var there []*crashEndpoint
		for _, e := range cr.endpoints[1:] {
			if !e.want.Gone {
				there = append(there, e)
			}
		}
		// At most 5 endpoints a store: the events' one and 4 others.
		var ok bool
		if len(there) < 4 && (len(there) == 0 || rng.IntN(3) == 0) {
			ok = cr.createEndpoint(rng)
		} else {
			e := there[rng.IntN(len(there))]
			next := crashEP{Gone: true}
			if rng.IntN(4) > 0 {
				cr.churnN++
				next = e.want
				next.Description = fmt.Sprintf("changed %d", cr.churnN)
				if rng.IntN(2) == 0 {
					next.Enabled = !next.Enabled
				}
				if rng.IntN(2) == 0 {
					next.URL = fmt.Sprintf("%s/churn/%d", cr.rc.URL, cr.churnN)
				}
			}
			ok = cr.changeEndpoint(e, next)
		}
		if !ok {
			return
		}
	}
}

func (cr *crashRun) createEndpoint(rng *mrand.Rand) bool {
	cr.churnN++
	want := crashEP{
		URL:         fmt.Sprintf("%s/churn/%d", cr.rc.URL, cr.churnN),
		Description: fmt.Sprintf("created %d", cr.churnN), // tells a creation the kill cut in the list
		Enabled:     rng.IntN(2) == 0,
	}
	r, err := cr.s.send(http.MethodPost, ctHooks(""), map[string]any{
		"url": want.URL, "description": want.Description, "events": []string{"webhook.test"}, "enabled": want.Enabled,
	}, "X-API-Key", ctKeyA)
	switch {
	case err != nil:
		cr.cut("endpoint creation", err)
		cr.n.endpointCut.Add(1)
		cr.cutCreates = append(cr.cutCreates, want)
		return false
	case r.status == http.StatusCreated:
		var v struct{ Data struct{ ID string } }
		if json.Unmarshal(r.body, &v) != nil || v.Data.ID == "" {
			cr.fail("unexpected answer", "endpoint creation at round %d: 201 %s; want an id", cr.round, r.body)
			return false
		}
		cr.n.endpointChanges.Add(1)
		cr.endpoints = append(cr.endpoints, &crashEndpoint{id: v.Data.ID, want: want, at: cr.round})
	default:
		cr.fail("unexpected answer", "endpoint creation at round %d: %d %s; want 201", cr.round, r.status, r.body)
		return false
	}
	return true
}

// changeEndpoint patches e to next, or deletes it if next is Gone.
func (cr *crashRun) changeEndpoint(e *crashEndpoint, next crashEP) bool {
	var r ctResp
	var err error
	want := http.StatusOK
	if next.Gone {
		want = http.StatusNoContent
		r, err = cr.s.send(http.MethodDelete, ctHooks("/"+e.id), nil, "X-API-Key", ctKeyA)
	} else {
		r, err = cr.s.send(http.MethodPatch, ctHooks("/"+e.id), map[string]any{
			"url": next.URL, "description": next.Description, "enabled": next.Enabled,
		}, "X-API-Key", ctKeyA)
	}
	switch {
	case err != nil:
		cr.cut("endpoint change", err)
		cr.n.endpointCut.Add(1)
		e.maybe = &next
		return false
	case r.status == want:
		cr.n.endpointChanges.Add(1)
		e.want, e.at = next, cr.round
	default:
		cr.fail("unexpected answer", "change of endpoint %s to %s at round %d: %d %s; want %d",
			e.id, next, cr.round, r.status, r.body, want)
		return false
	}
	return true
}

// ---- checks after a kill ----

// verifyAfterKill checks, once the service is up again, what the kill
// of this round put most at risk, and settles the outcomes it cut.
func (cr *crashRun) verifyAfterKill() {
	cr.t.Helper()
	cr.verifyEndpoints()

	cr.mu.Lock()
	fresh, unknown := cr.fresh, cr.unknown
	cr.fresh, cr.unknown = nil, nil
	cr.mu.Unlock()
	// Tokens issued since the last kill sign in.
	crashEach(fresh, func(c *crashCode) {
		r, err := cr.me(c.token)
		switch {
		case err != nil:
			cr.fail("unexpected answer", "/me after the kill of round %d: %v", cr.round, err)
		case r.status != http.StatusOK:
			cr.fail("lost token", "token of code %q issued at round %d: /me %d after the kill of round %d; want 200",
				c.code, c.redeemed, r.status, cr.round)
		default:
			cr.n.meChecks.Add(1)
			cr.add(&cr.consumed, c)
		}
	})
	// A registration or redemption cut by the kill: the code redeems once
	// (it was not used up), or it is invalid_grant (it was, or it was not
	// registered). Either way it is used up now.
	crashEach(unknown, func(c *crashCode) {
		r, err := cr.redeem(c)
		switch {
		case err != nil:
			cr.fail("unexpected answer", "redemption after the kill of round %d: %v", cr.round, err)
		case r.status == http.StatusOK:
			if c.acked < 0 {
				cr.n.regKept.Add(1)
			} else {
				cr.n.redeemKept.Add(1)
			}
			cr.issued(c, r, cr.round+1) // before the next round: checked after its kill
		case !crashInvalidGrant(r):
			cr.fail("unexpected answer", "code %q cut at round %d: %s after the restart; want 200 or invalid_grant",
				c.code, cr.round, crashAnswer(r))
		}
	})
}

// verifyEndpoints checks that the endpoints are as the acknowledged
// changes left them; a change the kill cut may or may not have been made.
func (cr *crashRun) verifyEndpoints() {
	t := cr.t
	t.Helper()
	r := cr.s.do(t, http.MethodGet, ctHooks(""), nil, "X-API-Key", ctKeyA)
	ctStatus(t, r, http.StatusOK)
	var v struct {
		Data []struct {
			ID, URL, Description string
			Enabled              bool
		}
	}
	require.NoError(t, json.Unmarshal(r.body, &v), "body %s", r.body)
	listed := map[string]crashEP{}
	for _, e := range v.Data {
		listed[e.ID] = crashEP{URL: e.URL, Description: e.Description, Enabled: e.Enabled}
	}
	for _, e := range cr.endpoints {
		got, ok := listed[e.id]
		if !ok {
			got = crashEP{Gone: true}
		}
		delete(listed, e.id)
		switch {
		case got == e.want:
			if e.maybe != nil {
				cr.n.endpointCutUndone.Add(1)
			}
		case e.maybe != nil && got == *e.maybe:
			cr.n.endpointCutKept.Add(1)
			e.want, e.at = got, cr.round
		default:
			cr.fail("lost endpoint change", "endpoint %s changed at round %d to %s: %s after the kill of round %d; want it kept",
				e.id, e.at, e.want, got, cr.round)
			e.want, e.at = got, cr.round
		}
		e.maybe = nil
	}
	for id, got := range listed {
		if i := slices.Index(cr.cutCreates, got); i >= 0 {
			cr.n.endpointCutKept.Add(1)
			cr.cutCreates = slices.Delete(cr.cutCreates, i, i+1)
		} else {
			cr.fail("unexpected answer", "endpoint %s %s after the kill of round %d: the test never made it", id, got, cr.round)
		}
		cr.endpoints = append(cr.endpoints, &crashEndpoint{id: id, want: got, at: cr.round})
	}
	cr.n.endpointCutUndone.Add(int64(len(cr.cutCreates)))
	cr.cutCreates = nil
}

// verifyAll checks, after the last kill, every code and token the rounds
// left: each code redeems once at most, each live token signs in until a
// replay revokes it, and revoked tokens stay revoked.
func (cr *crashRun) verifyAll() {
	cr.t.Helper()
	// The tokens redeemed while settling the last kill's cuts are checked
	// by this last round alone.
	cr.mu.Lock()
	cr.consumed = append(cr.consumed, cr.fresh...)
	live, consumed, replayCut, revoked := cr.live, cr.consumed, cr.replayCut, cr.revoked
	cr.live, cr.fresh, cr.consumed, cr.replayCut = nil, nil, nil, nil
	cr.mu.Unlock()

	last := "after the last kill"
	crashEach(live, func(c *crashCode) {
		r, err := cr.redeem(c)
		switch {
		case err != nil:
			cr.fail("unexpected answer", "redemption %s: %v", last, err)
			return
		case crashInvalidGrant(r):
			cr.fail("lost registration", "code %q acknowledged at round %d: redeemed %s: %s; want redeemable once",
				c.code, c.acked, last, crashAnswer(r))
			return
		case r.status != http.StatusOK:
			cr.fail("unexpected answer", "code %q acknowledged at round %d: redeemed %s: %s; want 200",
				c.code, c.acked, last, crashAnswer(r))
			return
		}
		cr.n.redeemed.Add(1)
		c.redeemed = crashRounds + 1
		cr.token(c, r)
		cr.replayOnce(c, last)
	})
	crashEach(consumed, func(c *crashCode) {
		r, err := cr.me(c.token)
		switch {
		case err != nil:
			cr.fail("unexpected answer", "/me %s: %v", last, err)
		case r.status != http.StatusOK:
			cr.fail("lost token", "token of code %q issued at round %d: /me %d %s; want 200", c.code, c.redeemed, r.status, last)
		default:
			cr.n.meChecks.Add(1)
		}
		cr.replayOnce(c, last)
	})
	crashEach(replayCut, func(c *crashCode) { cr.replayOnce(c, last) })
	crashEach(revoked, func(c *crashCode) {
		r, err := cr.me(c.token)
		switch {
		case err != nil:
			cr.fail("unexpected answer", "/me %s: %v", last, err)
		case r.status != http.StatusUnauthorized:
			cr.fail("lost revocation", "token of code %q revoked at round %d: /me %d %s; want 401", c.code, c.revoked, r.status, last)
		}
	})
}

// replayOnce checks that c, redeemed, is used up, and that the replay
// revoked its token.
func (cr *crashRun) replayOnce(c *crashCode, when string) {
	r, err := cr.redeem(c)
	switch {
	case err != nil:
		cr.fail("unexpected answer", "replay %s: %v", when, err)
		return
	case !crashInvalidGrant(r):
		cr.fail("double redemption", "code %q redeemed at round %d: %s %s; want invalid_grant", c.code, c.redeemed, crashAnswer(r), when)
		return
	}
	cr.n.replays.Add(1)
	if c.token == "" {
		return
	}
	r, err = cr.me(c.token)
	switch {
	case err != nil:
		cr.fail("unexpected answer", "/me %s: %v", when, err)
	case r.status != http.StatusUnauthorized && c.cutAt > 0:
		cr.fail("token kept by a replay", "token of code %q issued at round %d, replayed at round %d (cut) and %s: /me %d; want 401",
			c.code, c.redeemed, c.cutAt, when, r.status)
	case r.status != http.StatusUnauthorized:
		cr.fail("token kept by a replay", "token of code %q issued at round %d, replayed %s: /me %d; want 401",
			c.code, c.redeemed, when, r.status)
	}
}

// verifyDelivered waits until every event answered 202 has reached the
// receiver, or until the service has no delivery pending, which leaves
// the missing ones lost; it checks the signatures and reports duplicates.
func (cr *crashRun) verifyDelivered(endpoint, secret string) {
	t := cr.t
	t.Helper()
	seen := func() map[string]int {
		n := map[string]int{}
		for _, h := range cr.rc.got() {
			var ev struct{ ID string }
			if json.Unmarshal(h.body, &ev) == nil {
				n[ev.ID]++
			}
		}
		return n
	}
	missing := func(n map[string]int) int {
		m := 0
		for id := range cr.events {
			if n[id] == 0 {
				m++
			}
		}
		return m
	}
	pending := func() bool {
		r := cr.s.do(t, http.MethodGet, ctHooks("/"+endpoint+"/deliveries?status=pending&limit=1"), nil, "X-API-Key", ctKeyA)
		ctStatus(t, r, http.StatusOK)
		var v struct{ Data []json.RawMessage }
		require.NoError(t, json.Unmarshal(r.body, &v), "body %s", r.body)
		return len(v.Data) > 0
	}
	// The backlog a run leaves takes a while to drain through the
	// receiver: the wait goes on while deliveries arrive, and ends when
	// none has for crashDeliveryWait.
	stalled := time.Now().Add(crashDeliveryWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	got := seen()
	more := true
	for left := missing(got); left > 0 && time.Now().Before(stalled); {
		// Asked before the receiver is read: a delivery not pending then
		// has ended, and its request reached the receiver before.
		more = pending()
		got = seen()
		if !more {
			break
		}
		if n := missing(got); n < left {
			left, stalled = n, time.Now().Add(crashDeliveryWait)
		}
		<-tick.C
	}

	why := "no delivery pending"
	if more && missing(got) > 0 {
		why = fmt.Sprintf("deliveries still pending, none delivered for %v", crashDeliveryWait)
	}
	for id, round := range cr.events {
		if got[id] == 0 {
			cr.fail("lost event", "event %s accepted at round %d: never delivered (%s); want at least once", id, round, why)
		}
	}
	var dups, extra, unacked int
	for id, n := range got {
		if _, ok := cr.events[id]; !ok {
			unacked++ // a publication the kill cut, made
		}
		if n > 1 {
			dups++
			extra += n - 1
		}
	}
	for _, h := range cr.rc.got() {
		ctVerifySignature(t, h, secret)
	}
	t.Logf("events: %d answered 202, %d cut; %d of the accepted delivered, %d with duplicates (%d extra deliveries); %d cut but delivered",
		len(cr.events), cr.n.publishCut.Load(), len(cr.events)-missing(got), dups, extra, unacked)
}

// crashEach runs f on every code, crashWorkers at a time.
func crashEach(codes []*crashCode, f func(*crashCode)) {
	ch := make(chan *crashCode)
	var wg sync.WaitGroup
	for range crashWorkers {
		wg.Go(func() {
			for c := range ch {
				f(c)
			}
		})
	}
	for _, c := range codes {
		ch <- c
	}
	close(ch)
	wg.Wait()
}
