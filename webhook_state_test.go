package main

import (
	"bytes"
	"container/heap"
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/egress"
	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
)

// White-box tests of the hooks state without a dispatcher: attempts go
// through advanceLocked, takeLocked and finishLocked as the native workers
// and the wasm host drive them, with a made-up outcome instead of HTTP.

// whHooks returns hooks for c with n endpoints of store A subscribed to
// orders, and no goroutines.
func whHooks(t *testing.T, c whConf, n int) (*hooks, []*endpoint) {
	t.Helper()
	if c.DataDir == "" {
		c.DataDir = t.TempDir()
	}
	hk := newHooks(whParseConfig(t, c))
	hk.st = whStore(t, c.DataDir)
	var eps []*endpoint
	for range n {
		eps = append(eps, whAddEndpoint(hk, whStoreA))
	}
	return hk, eps
}

// whAddEndpoint adds to hk an enabled endpoint of store, taking order
// events, at an address that refuses connections.
func whAddEndpoint(hk *hooks, store string) *endpoint {
	e := &endpoint{ID: newID("we_"), StoreID: store, URL: "http://127.0.0.1:1/", Events: []string{eventOrderStatus}, Enabled: true, Secret: newSecret()}
	hk.endpoints[e.ID] = e
	hk.byStore[store] = append(hk.byStore[store], e)
	hk.touchLocked(kindEndpoint, e.ID)
	return e
}

// whStores are the stores of the tests' data_dirs, in memory: what hooks
// of one data_dir persist, hooks loaded from it read.
var whStores sync.Map // data_dir → store.Store

// whStore returns the store of dir, made at its first use.
func whStore(t *testing.T, dir string) store.Store {
	if st, ok := whStores.Load(dir); ok {
		return st.(store.Store)
	}
	db, err := embedded.Open("", embedded.Options{})
	require.NoError(t, err)
	st, loaded := whStores.LoadOrStore(dir, db)
	if loaded {
		db.Close()
	}
	return st.(store.Store)
}

// whLoaded returns hooks of configuration c loaded from c.DataDir, as a
// start would.
func whLoaded(t *testing.T, c whConf) *hooks {
	t.Helper()
	hk := newHooks(whParseConfig(t, c))
	hk.st = whStore(t, c.DataDir)
	require.NoError(t, hk.loadStore(t.Context()))
	return hk
}

// whImported returns hooks of configuration c that imported the
// webhooks.json an earlier build left in c.DataDir, as a start would.
func whImported(t *testing.T, c whConf) *hooks {
	t.Helper()
	hk := newHooks(whParseConfig(t, c))
	hk.st = whStore(t, c.DataDir)
	require.NoError(t, hk.importHooksFile(t.Context(), c.DataDir))
	require.NoError(t, hk.loadStore(t.Context()))
	return hk
}

// whSavedWithEvent is whHooks with one endpoint of store, an order event
// published to it (with Idempotency-Key key, if not empty), all saved to
// c.DataDir; it returns the endpoint and the event's id.
func whSavedWithEvent(t *testing.T, c whConf, store, key string) (*hooks, *endpoint, string) {
	t.Helper()
	hk, _ := whHooks(t, c, 0)
	e := whAddEndpoint(hk, store)
	evt, ok := hk.publish(store, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), key)
	require.True(t, ok)
	require.NoError(t, hk.persist(t.Context()))
	return hk, e, evt
}

// whAttemptDue makes one attempt of every delivery due now, answered by
// status. hk.mu must be held.
func whAttemptDue(hk *hooks, status int) {
	now := time.Now()
	for {
		hk.advanceLocked(now)
		j := hk.takeLocked(now)
		if j == nil {
			return
		}
		hk.finishLocked(j, egress.Result{Status: status})
	}
}

// whReloaded saves hk's state and loads it into new hooks, returned with
// their lock held until the test ends: what a restart would bring back.
func whReloaded(t *testing.T, hk *hooks) *hooks {
	t.Helper()
	require.NoError(t, hk.persist(t.Context()))
	hk2 := newHooks(hk.cfg)
	hk2.st = hk.st
	require.NoError(t, hk2.loadStore(t.Context()))
	hk2.mu.Lock()
	t.Cleanup(hk2.mu.Unlock)
	return hk2
}

// whCheckRefs checks that hk.events holds exactly the events deliveries
// refer to, each with the right reference count.
func whCheckRefs(t *testing.T, hk *hooks) {
	t.Helper()
	want := map[*event]int{}
	for _, d := range hk.deliv {
		want[d.ev]++
	}
	got := map[*event]int{}
	for id, ev := range hk.events {
		assert.Equal(t, id, ev.ID)
		got[ev] = ev.refs
	}
	assert.Equal(t, want, got, "events and their reference counts")
	n := 0
	pending := map[string]int64{}
	for _, e := range hk.endpoints {
		n += len(e.log)
		fin := 0
		var held int64
		for _, d := range e.log {
			assert.Same(t, d, hk.deliv[d.ID], "logged deliveries are indexed")
			if d.Status != statusPending {
				fin++
				held += logCost(d)
			} else {
				pending[e.StoreID] += logCost(d)
			}
		}
		assert.Equal(t, fin, e.finished, "finished deliveries in the log of %s", e.ID)
		assert.Equal(t, held, e.logBytes, "what the finished deliveries in the log of %s hold", e.ID)
	}
	assert.Equal(t, n, len(hk.deliv), "indexed deliveries are logged")
	for store, held := range hk.pending {
		assert.Equal(t, pending[store], held, "what the pending deliveries of store %s hold", store)
	}
	for store, held := range pending {
		assert.Equal(t, held, hk.pending[store], "what the pending deliveries of store %s hold", store)
	}
	keys := map[string]int{}
	for k := range hk.idem {
		store, _, _ := strings.Cut(k, "\x00")
		keys[store]++
	}
	for store, n := range hk.idemCount {
		assert.Equal(t, keys[store], n, "Idempotency-Keys of store %s", store)
	}
	queued := map[idemEntry]bool{}
	for i, q := range hk.idemQueue {
		queued[q] = true
		if i > 0 {
			assert.LessOrEqual(t, hk.idemQueue[i-1].expires, q.expires, "the queue is in order of expiry")
		}
	}
	for k, v := range hk.idem {
		assert.True(t, queued[idemEntry{k, v.Expires}], "key %q is queued to expire", k)
	}
}

func TestEventReferenceCounts(t *testing.T) {
	conf := whFast()
	conf.LogSize = 3
	hk, eps := whHooks(t, conf, 2)
	hk.mu.Lock()
	var first *delivery
	for i := range 10 {
		ev := hk.newEventLocked(eventOrderStatus, []byte(`{"id":"o","status":"pending"}`))
		for _, e := range eps {
			d := hk.enqueueLocked(e, ev)
			if i == 0 && first == nil {
				first = d
			}
		}
		whAttemptDue(hk, 200)
		whCheckRefs(t, hk)
	}
	assert.Len(t, hk.events, 3, "the events of the 3 deliveries each endpoint keeps")
	assert.Nil(t, hk.deliv[first.ID], "the oldest delivery was trimmed")
	assert.Zero(t, first.ev.refs)

	// A manual retry refers to the event of a kept delivery; trimming that
	// delivery leaves the event to the retry.
	old := eps[0].log[0]
	retry := hk.enqueueLocked(eps[0], old.ev)
	assert.Nil(t, hk.deliv[old.ID], "the retry pushed the oldest out of the log")
	assert.Same(t, old.ev, hk.events[old.EventID], "the retry still refers to its event")
	whCheckRefs(t, hk)
	whAttemptDue(hk, 500) // pending now, waiting for its retry
	for range 3 {
		hk.enqueueLocked(eps[0], hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
		whAttemptDue(hk, 200)
	}
	assert.Same(t, retry, hk.deliv[retry.ID], "a pending delivery is never trimmed")
	assert.Same(t, retry, eps[0].log[0], "the oldest in the log")
	assert.Len(t, eps[0].log, 3)
	whCheckRefs(t, hk)

	hk.removeEndpointLocked(eps[1])
	whCheckRefs(t, hk)
	hk.mu.Unlock()

	// The counts are rebuilt on load.
	hk2 := whReloaded(t, hk)
	assert.Len(t, hk2.deliv, 3)
	whCheckRefs(t, hk2)
}

// TestTrimLog checks the log trimming against the plain rule it keeps:
// beyond the retention, the oldest finished deliveries go, pending ones
// stay whatever their age, and the order is kept.
func TestTrimLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		conf := whFast()
		conf.LogSize = 1 + rng.IntN(6)
		hk, eps := whHooks(t, conf, 1)
		e := eps[0]
		var model []*delivery // what the log must hold
		hk.mu.Lock()
		for i := range 3 + rng.IntN(40) {
			// Some logged deliveries finish in between.
			for _, d := range e.log {
				if d.Status == statusPending && rng.IntN(3) == 0 {
					hk.sched.remove(d)
					hk.endLocked(e, d, statusSucceeded, "")
				}
			}
			d := hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
			model = append(model, d)
			excess := len(model) - conf.LogSize
			model = slices.DeleteFunc(model, func(d *delivery) bool {
				if excess > 0 && d.Status != statusPending {
					excess--
					return true
				}
				return false
			})
			require.Equal(t, model, e.log, "round %d, delivery %d", round, i)
			whCheckRefs(t, hk)
		}
		hk.mu.Unlock()
	}
}

// TestDisableFailsQueuedDeliveries checks that disabling an endpoint fails
// every delivery it had queued, first attempts and retries alike, wherever
// each waited (ready, waiting on the endpoint, scheduled), and gives their
// places back; that a test call made while it is disabled goes once,
// without a retry; and that all of it survives a save and a reload.
func TestDisableFailsQueuedDeliveries(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	e := eps[0]
	hk.mu.Lock()
	retry := hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
	whAttemptDue(hk, 500) // one failed attempt; the retry is scheduled
	retry.NextAt = time.Now().Add(time.Hour).UnixNano()
	heap.Fix(&hk.sched, retry.index) // and stays scheduled while the test runs
	var queued []*delivery
	for range perEndpointInFlight + 1 { // fill e's places, and one more waits
		queued = append(queued, hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`))))
	}
	hk.advanceLocked(time.Now())
	require.Len(t, hk.ready, perEndpointInFlight)
	require.Len(t, e.waiting, 1)
	require.Len(t, hk.sched, 1)
	hk.mu.Unlock()
	require.NoError(t, hk.persist(t.Context())) // nothing left to write
	hk.mu.Lock()

	e.Enabled = false
	hk.dropQueuedLocked(e, dropAll)
	for i, d := range append(queued, retry) {
		assert.Equal(t, statusFailed, d.Status, "delivery %d", i)
	}
	assert.Empty(t, queued[0].Attempts, "failed without an attempt")
	assert.Len(t, retry.Attempts, 1)
	assert.Empty(t, hk.ready)
	assert.Empty(t, e.waiting)
	assert.Empty(t, hk.sched)
	assert.Zero(t, e.inflight, "every place is given back")
	assert.NotEmpty(t, hk.touched, "what changed is to be written")

	test := hk.enqueueLocked(e, hk.newEventLocked(eventTest, []byte(`{}`)))
	test.Explicit = true // as the test call makes it
	hk.advanceLocked(time.Now())
	j := hk.takeLocked(time.Now())
	require.NotNil(t, j, "an explicit test call still goes")
	assert.Same(t, test, j.d)
	hk.finishLocked(j, egress.Result{Status: 500})
	assert.Equal(t, statusFailed, test.Status, "and is not retried")
	assert.Empty(t, hk.sched)
	whCheckRefs(t, hk)
	hk.mu.Unlock()

	hk2 := whReloaded(t, hk)
	for _, d := range append(queued, retry, test) {
		assert.Equal(t, statusFailed, hk2.deliv[d.ID].Status)
	}
	assert.Empty(t, hk2.sched, "nothing is scheduled again after a restart")
}

// TestUnsubscribedTypeDropped checks that an endpoint whose events no
// longer include a type takes no more deliveries of it (API.md §5: only
// endpoints subscribed to the type receive it): what it had queued of that
// type, retries included, is failed wherever it waited, the places those
// held go to what waits behind them, an attempt under way takes no retry,
// and a test call still goes; all of it holds after a reload.
func TestUnsubscribedTypeDropped(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	e := eps[0]
	e.Events = []string{eventOrderStatus, eventTest}
	hk.mu.Lock()
	retry := hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
	whAttemptDue(hk, 500) // one failed attempt; the retry is scheduled
	retry.NextAt = time.Now().Add(time.Hour).UnixNano()
	heap.Fix(&hk.sched, retry.index)
	var orders []*delivery
	for range perEndpointInFlight {
		orders = append(orders, hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`))))
	}
	hk.advanceLocked(time.Now())
	underWay := hk.takeLocked(time.Now()) // the first order's attempt is under way
	require.NotNil(t, underWay)
	test := hk.enqueueLocked(e, hk.newEventLocked(eventTest, []byte(`{}`)))
	test.Explicit = true // as the test call makes it
	waiting := hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
	hk.advanceLocked(time.Now())
	require.Len(t, hk.ready, perEndpointInFlight-1)
	require.Equal(t, []*delivery{test, waiting}, e.waiting)

	e.Events = []string{eventTest}
	hk.dropQueuedLocked(e, e.refusesLocked)
	for i, d := range append(orders[1:], retry, waiting) {
		assert.Equal(t, statusFailed, d.Status, "order delivery %d", i)
	}
	assert.Equal(t, statusPending, underWay.d.Status, "an attempt under way finishes")
	assert.Empty(t, hk.sched)
	assert.Equal(t, []*delivery{test}, hk.ready, "the test call takes a freed place")
	assert.Empty(t, e.waiting)
	assert.Equal(t, 2, e.inflight, "the attempt under way and the test call")

	hk.finishLocked(underWay, egress.Result{Status: 500})
	assert.Equal(t, statusFailed, underWay.d.Status, "and takes no retry")
	j := hk.takeLocked(time.Now())
	require.NotNil(t, j)
	assert.Same(t, test, j.d)
	hk.finishLocked(j, egress.Result{Status: 500})
	assert.Equal(t, statusPending, test.Status, "the test call is retried: the endpoint takes it")
	assert.Zero(t, e.inflight, "every place is given back")
	whCheckRefs(t, hk)
	hk.mu.Unlock()

	hk2 := whReloaded(t, hk)
	for _, d := range append(orders, retry, waiting) {
		assert.Equal(t, statusFailed, hk2.deliv[d.ID].Status)
	}
	assert.Equal(t, statusPending, hk2.deliv[test.ID].Status)
}

// TestDisabledEndpointAfterRestart: an attempt under way when its endpoint
// was disabled is left pending by the shutdown (or a crash) and comes back
// with the state. After the restart it is failed, not sent, unless it was
// asked for explicitly (the test call, a manual retry).
func TestDisabledEndpointAfterRestart(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	e := eps[0]
	hk.mu.Lock()
	published := hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
	explicit := hk.enqueueLocked(e, hk.newEventLocked(eventTest, []byte(`{}`)))
	explicit.Explicit = true
	hk.advanceLocked(time.Now())
	require.Len(t, hk.ready, 2)
	// Both are taken by workers; the endpoint is disabled meanwhile; the
	// shutdown cancels both attempts, which leaves them pending.
	j1, j2 := hk.takeLocked(time.Now()), hk.takeLocked(time.Now())
	e.Enabled = false
	hk.dropQueuedLocked(e, dropAll)
	hk.finishLocked(j1, egress.Result{Err: context.Canceled})
	hk.finishLocked(j2, egress.Result{Err: context.Canceled})
	require.Equal(t, statusPending, published.Status)
	require.Equal(t, statusPending, explicit.Status)
	hk.mu.Unlock()

	hk2 := whReloaded(t, hk)
	hk2.advanceLocked(time.Now())
	assert.Equal(t, statusFailed, hk2.deliv[published.ID].Status, "a published delivery is not sent to a disabled endpoint")
	j := hk2.takeLocked(time.Now())
	require.NotNil(t, j, "the explicit one goes")
	assert.Equal(t, explicit.ID, j.d.ID)
	assert.Nil(t, hk2.takeLocked(time.Now()))
}

// TestAbandonedAttemptScheduledAgain: an attempt given up unrecorded (the
// service stopping, or the edge host giving up the requests of an
// instance it replaced) leaves its delivery scheduled, due at once, so the
// next round sends it; before, it stayed pending in no queue until a
// restart.
func TestAbandonedAttemptScheduledAgain(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	hk.mu.Lock()
	defer hk.mu.Unlock()
	d := hk.enqueueLocked(eps[0], hk.newEventLocked(eventOrderStatus, []byte(`{}`)))
	hk.advanceLocked(time.Now())
	j := hk.takeLocked(time.Now())
	require.NotNil(t, j)
	hk.finishLocked(j, egress.Result{Err: context.Canceled})
	assert.Equal(t, statusPending, d.Status)
	assert.Empty(t, d.Attempts, "not recorded")
	assert.Zero(t, eps[0].inflight, "its place is given back")
	require.GreaterOrEqual(t, d.index, 0, "scheduled again")
	hk.advanceLocked(time.Now())
	again := hk.takeLocked(time.Now())
	require.NotNil(t, again, "due at once")
	assert.Same(t, d, again.d)
}

// TestEventBodySurvivesSave: an event's body is kept byte for byte across
// a save and a load (API.md §5.1, "body exactly"), <, > and & included,
// which json.Marshal would escape.
func TestEventBodySurvivesSave(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	body := []byte(`{"id":"evt_1","data":{"object":{"id":"<b>A&B</b>","note":"a\u0026b é"}}}`)
	hk.mu.Lock()
	d := hk.enqueueLocked(eps[0], hk.newEventLocked(eventOrderStatus, body))
	got := string(d.ev.Body)
	hk.mu.Unlock()
	hk2 := whReloaded(t, hk)
	if after := string(hk2.deliv[d.ID].ev.Body); after != got {
		t.Errorf("body after a reload = %s; want %s", after, got)
	}
}

// TestDeliveryLogTrimmedAsDeliveriesEnd: deliveries pending beyond
// delivery_log_size stay in the log, and once they end it is back to its
// size at once, whichever way they end, not only when the next delivery
// is added (docs/configuration.md: the log keeps the newest delivery_log_size).
func TestDeliveryLogTrimmedAsDeliveriesEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func(hk *hooks, e *endpoint)
	}{
		{"answered 200", func(hk *hooks, e *endpoint) { whAttemptDue(hk, 200) }},
		{"out of retries", func(hk *hooks, e *endpoint) {
			for range len(hk.cfg.Webhooks.RetrySchedule) + 1 {
				for _, d := range e.log { // each retry due now
					if d.index >= 0 {
						d.NextAt = time.Now().UnixNano()
						heap.Fix(&hk.sched, d.index)
					}
				}
				whAttemptDue(hk, 500)
			}
		}},
		{"endpoint disabled", func(hk *hooks, e *endpoint) {
			e.Enabled = false
			hk.dropQueuedLocked(e, dropAll)
		}},
		{"type no longer taken", func(hk *hooks, e *endpoint) {
			e.Events = []string{eventTest}
			hk.advanceLocked(time.Now())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conf := whFast()
			conf.LogSize = 2
			hk, eps := whHooks(t, conf, 1)
			e := eps[0]
			hk.mu.Lock()
			defer hk.mu.Unlock()
			for range 3 {
				hk.enqueueLocked(e, hk.newEventLocked(eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`)))
			}
			require.Len(t, e.log, 3, "pending deliveries stay beyond the size")
			tt.end(hk, e)
			for _, d := range e.log {
				require.NotEqual(t, statusPending, d.Status, "%s is still pending", d.ID)
			}
			assert.Len(t, e.log, 2, "the log once they ended")
			assert.Equal(t, 2, e.finished)
			whCheckRefs(t, hk)
		})
	}
}

// TestIdempotencyKeysLeaveTheBudget: keys that expire at a tick give their
// room in the store's budget back, and a restart counts what it restores.
func TestIdempotencyKeysLeaveTheBudget(t *testing.T) {
	hk, _ := whHooks(t, whFast(), 1)
	hk.budget.idem = 2
	for _, k := range []string{"k1", "k2"} {
		_, ok := hk.publish(whStoreA, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), k)
		require.True(t, ok, "publish with %s", k)
	}
	_, ok := hk.publish(whStoreA, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "k3")
	require.False(t, ok, "a third key past a budget of two")

	restored := whReloaded(t, hk)
	assert.Equal(t, 2, restored.idemCount[whStoreA], "keys counted at a restart")
	whCheckRefs(t, restored)

	require.NoError(t, hk.tick(time.Now().Add(idempotencyTTL+time.Second)))
	hk.mu.Lock()
	defer hk.mu.Unlock()
	assert.Zero(t, hk.idemCount[whStoreA], "after the keys expired")
	whCheckRefs(t, hk)
	hk.mu.Unlock()
	_, ok = hk.publish(whStoreA, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "k3")
	hk.mu.Lock()
	assert.True(t, ok, "a new key once the old ones expired")
}

// TestIdempotencyKeyAgainAfterItExpired publishes with a key whose entry
// expired but was not swept yet: it is remembered afresh, and the sweep of
// its first expiry leaves the new entry alone.
func TestIdempotencyKeyAgainAfterItExpired(t *testing.T) {
	hk, _ := whHooks(t, whFast(), 1)
	obj := []byte(`{"id":"o1","status":"pending"}`)
	first, ok := hk.publish(whStoreA, eventOrderStatus, obj, "k1")
	require.True(t, ok)
	hk.mu.Lock()
	e := hk.idem[whStoreA+"\x00k1"]
	e.Expires = time.Now().Unix() - 1 // expired, not yet swept
	hk.idem[whStoreA+"\x00k1"] = e
	hk.idemQueue[0].expires = e.Expires
	hk.mu.Unlock()

	second, ok := hk.publish(whStoreA, eventOrderStatus, obj, "k1")
	require.True(t, ok)
	require.NotEqual(t, first, second, "an expired key publishes anew")
	require.NoError(t, hk.tick(time.Now())) // sweeps the first expiry
	again, _ := hk.publish(whStoreA, eventOrderStatus, obj, "k1")
	assert.Equal(t, second, again, "the key's new entry survived the sweep of its old one")
	hk.mu.Lock()
	defer hk.mu.Unlock()
	assert.Equal(t, 1, hk.idemCount[whStoreA])
	assert.Len(t, hk.idemQueue, 1, "the swept entry left the queue")
	whCheckRefs(t, hk)
}

// TestRemovedStoreKeepsItsWebhooks restarts without store B in the
// configuration, then with it again, as a rollback would: B's endpoint,
// secret, pending delivery and event are kept, inactive, meanwhile, saves
// included, and come back whole.
func TestRemovedStoreKeepsItsWebhooks(t *testing.T) {
	conf := whFast()
	conf.DataDir = t.TempDir()
	_, eB, evt := whSavedWithEvent(t, conf, whStoreB, "")

	without := conf
	without.NoStoreB = true
	hkA := whLoaded(t, without)
	hkA.mu.Lock()
	assert.Empty(t, hkA.endpoints, "store B's endpoint is not served")
	assert.Empty(t, hkA.sched, "nor its delivery sent")
	whCheckRefs(t, hkA)
	hkA.mu.Unlock()
	require.NoError(t, hkA.persist(t.Context())) // a write without B configured keeps it

	back := whLoaded(t, conf)
	back.mu.Lock()
	defer back.mu.Unlock()
	e := back.endpoints[eB.ID]
	require.NotNil(t, e, "store B's endpoint, once B is configured again")
	assert.Equal(t, eB.Secret, e.Secret)
	require.Len(t, e.log, 1)
	assert.Equal(t, evt, e.log[0].EventID)
	assert.Equal(t, statusPending, e.log[0].Status)
	assert.Len(t, back.sched, 1, "its pending delivery is scheduled again")
	whCheckRefs(t, back)
}

// TestStoreIDSpellingInSavedState loads webhook state saved under another
// spelling of a store's id (a configuration whose case changed): it is the
// same store's, served and counted under its one spelling, not parked nor
// lost at the next save.
func TestStoreIDSpellingInSavedState(t *testing.T) {
	conf := whFast()
	conf.DataDir = t.TempDir()
	src := conf
	src.DataDir = t.TempDir()
	hk, eA, _ := whSavedWithEvent(t, src, whStoreA, "k1")
	path := filepath.Join(conf.DataDir, hooksFileName)
	writeEarlierHooksFile(t, hk, path)
	editSavedHooks(t, path, func(state []byte) []byte {
		return bytes.ReplaceAll(state, []byte(whStoreA), []byte(strings.ToUpper(whStoreA)))
	})

	back := whReloaded(t, whImported(t, conf)) // and written again
	e := back.endpoints[eA.ID]
	require.NotNil(t, e)
	assert.Equal(t, whStoreA, e.StoreID, "the endpoint's store, in its one spelling")
	assert.Equal(t, []*endpoint{e}, back.byStore[whStoreA])
	assert.Empty(t, back.parked.Endpoints)
	assert.Contains(t, back.idem, whStoreA+"\x00k1")
	assert.Equal(t, 1, back.idemCount[whStoreA])
	whCheckRefs(t, back)
}
