package main

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"math"
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
	"deeplink/internal/webhook"
)

// White-box tests of the hooks state without a dispatcher: attempts go
// through advanceLocked, takeLocked and finishLocked as the native workers
// and the wasm host drive them, with a made-up outcome instead of HTTP.

// whHooks returns hooks for c with n endpoints of store A subscribed to
// orders, and no goroutines.
func whHooks(t *testing.T, c whConf, n int) (*webhook.Hooks, []*webhook.Endpoint) {
	t.Helper()
	if c.DataDir == "" {
		c.DataDir = t.TempDir()
	}
	hk := webhook.NewHooks(whParseConfig(t, c))
	hk.St = whStore(t, c.DataDir)
	var eps []*webhook.Endpoint
	for range n {
		eps = append(eps, whAddEndpoint(hk, whStoreA))
	}
	return hk, eps
}

// whAddEndpoint adds to hk an enabled endpoint of store, taking order
// events, at an address that refuses connections.
func whAddEndpoint(hk *webhook.Hooks, store string) *webhook.Endpoint {
	e := &webhook.Endpoint{ID: webhook.NewID("we_"), StoreID: store, URL: "http://127.0.0.1:1/", Events: []string{webhook.EventOrderStatus}, Enabled: true, Secret: webhook.NewSecret()}
	hk.Endpoints[e.ID] = e
	hk.ByStore[store] = append(hk.ByStore[store], e)
	hk.TouchLocked(webhook.KindEndpoint, e.ID)
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
func whLoaded(t *testing.T, c whConf) *webhook.Hooks {
	t.Helper()
	hk := webhook.NewHooks(whParseConfig(t, c))
	hk.St = whStore(t, c.DataDir)
	require.NoError(t, hk.LoadStore(t.Context()))
	return hk
}

// whImported returns hooks of configuration c that imported the
// webhooks.json an earlier build left in c.DataDir, as a start would.
func whImported(t *testing.T, c whConf) *webhook.Hooks {
	t.Helper()
	hk := webhook.NewHooks(whParseConfig(t, c))
	hk.St = whStore(t, c.DataDir)
	require.NoError(t, hk.ImportHooksFile(t.Context(), c.DataDir, filepath.Join(c.DataDir, legacyMovedDir)))
	require.NoError(t, hk.LoadStore(t.Context()))
	return hk
}

// whSavedWithEvent is whHooks with one endpoint of store, an order event
// published to it (with Idempotency-Key key, if not empty), all saved to
// c.DataDir; it returns the endpoint and the event's id.
func whSavedWithEvent(t *testing.T, c whConf, store, key string) (*webhook.Hooks, *webhook.Endpoint, string) {
	t.Helper()
	hk, _ := whHooks(t, c, 0)
	e := whAddEndpoint(hk, store)
	evt, ok := hkPublish(t, hk, store, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), key)
	require.True(t, ok)
	require.NoError(t, hk.Persist(t.Context()))
	return hk, e, evt
}

// whAttemptDue makes one attempt of every delivery due now, answered by
// status. hk.Mu must be held.
func whAttemptDue(hk *webhook.Hooks, status int) {
	now := time.Now()
	for {
		hk.AdvanceLocked(now)
		j := hk.TakeLocked(now)
		if j == nil {
			return
		}
		hk.FinishLocked(j, egress.Result{Status: status})
	}
}

// whReloaded saves hk's state and loads it into new hooks, returned with
// their lock held until the test ends: what a restart would bring back.
func whReloaded(t *testing.T, hk *webhook.Hooks) *webhook.Hooks {
	t.Helper()
	require.NoError(t, hk.Persist(t.Context()))
	hk2 := webhook.NewHooks(hk.Cfg)
	hk2.St = hk.St
	require.NoError(t, hk2.LoadStore(t.Context()))
	hk2.Mu.Lock()
	t.Cleanup(hk2.Mu.Unlock)
	return hk2
}

// whCheckRefs checks that hk.events holds exactly the events deliveries
// refer to, each with the right reference count.
func whCheckRefs(t *testing.T, hk *webhook.Hooks) {
	t.Helper()
	want := map[*webhook.Event]int{}
	for _, d := range hk.Deliv {
		want[d.Ev]++
	}
	got := map[*webhook.Event]int{}
	for id, ev := range hk.Events {
		assert.Equal(t, id, ev.ID)
		got[ev] = ev.Refs
	}
	assert.Equal(t, want, got, "events and their reference counts")
	n := 0
	pending := map[string]int64{}
	for _, e := range hk.Endpoints {
		n += len(e.Log)
		fin := 0
		var held int64
		for _, d := range e.Log {
			assert.Same(t, d, hk.Deliv[d.ID], "logged deliveries are indexed")
			if d.Status != webhook.StatusPending {
				fin++
				held += webhook.LogCost(d)
			} else {
				pending[e.StoreID] += webhook.LogCost(d)
			}
		}
		assert.Equal(t, fin, e.Finished, "finished deliveries in the log of %s", e.ID)
		assert.Equal(t, held, e.LogBytes, "what the finished deliveries in the log of %s hold", e.ID)
	}
	assert.Equal(t, n, len(hk.Deliv), "indexed deliveries are logged")
	for store, held := range hk.Pending {
		assert.Equal(t, pending[store], held, "what the pending deliveries of store %s hold", store)
	}
	for store, held := range pending {
		assert.Equal(t, held, hk.Pending[store], "what the pending deliveries of store %s hold", store)
	}
	keys := map[string]int{}
	for k := range hk.Idem {
		store, _, _ := strings.Cut(k, "\x00")
		keys[store]++
	}
	for store, n := range hk.IdemCount {
		assert.Equal(t, keys[store], n, "Idempotency-Keys of store %s", store)
	}
	queued := map[webhook.IdemEntry]bool{}
	for i, q := range hk.IdemQueue {
		queued[q] = true
		if i > 0 {
			assert.LessOrEqual(t, hk.IdemQueue[i-1].Expires, q.Expires, "the queue is in order of expiry")
		}
	}
	for k, v := range hk.Idem {
		assert.True(t, queued[webhook.IdemEntry{Key: k, Expires: v.Expires}], "key %q is queued to expire", k)
	}
}

func TestEventReferenceCounts(t *testing.T) {
	conf := whFast()
	conf.LogSize = 3
	hk, eps := whHooks(t, conf, 2)
	hk.Mu.Lock()
	var first *webhook.Delivery
	for i := range 10 {
		ev := hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{"id":"o","status":"pending"}`))
		for _, e := range eps {
			d := hk.EnqueueLocked(e, ev)
			if i == 0 && first == nil {
				first = d
			}
		}
		whAttemptDue(hk, 200)
		whCheckRefs(t, hk)
	}
	assert.Len(t, hk.Events, 3, "the events of the 3 deliveries each endpoint keeps")
	assert.Nil(t, hk.Deliv[first.ID], "the oldest delivery was trimmed")
	assert.Zero(t, first.Ev.Refs)

	// A manual retry refers to the event of a kept delivery; trimming that
	// delivery leaves the event to the retry.
	old := eps[0].Log[0]
	retry := hk.EnqueueLocked(eps[0], old.Ev)
	assert.Nil(t, hk.Deliv[old.ID], "the retry pushed the oldest out of the log")
	assert.Same(t, old.Ev, hk.Events[old.EventID], "the retry still refers to its event")
	whCheckRefs(t, hk)
	whAttemptDue(hk, 500) // pending now, waiting for its retry
	for range 3 {
		hk.EnqueueLocked(eps[0], hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
		whAttemptDue(hk, 200)
	}
	assert.Same(t, retry, hk.Deliv[retry.ID], "a pending delivery is never trimmed")
	assert.Same(t, retry, eps[0].Log[0], "the oldest in the log")
	assert.Len(t, eps[0].Log, 3)
	whCheckRefs(t, hk)

	hk.RemoveEndpointLocked(eps[1])
	whCheckRefs(t, hk)
	hk.Mu.Unlock()

	// The counts are rebuilt on load.
	hk2 := whReloaded(t, hk)
	assert.Len(t, hk2.Deliv, 3)
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
		var model []*webhook.Delivery // what the log must hold
		hk.Mu.Lock()
		for i := range 3 + rng.IntN(40) {
			// Some logged deliveries finish in between.
			for _, d := range e.Log {
				if d.Status == webhook.StatusPending && rng.IntN(3) == 0 {
					hk.Sched.Remove(d)
					hk.EndLocked(e, d, webhook.StatusSucceeded, "")
				}
			}
			d := hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
			model = append(model, d)
			excess := len(model) - conf.LogSize
			model = slices.DeleteFunc(model, func(d *webhook.Delivery) bool {
				if excess > 0 && d.Status != webhook.StatusPending {
					excess--
					return true
				}
				return false
			})
			require.Equal(t, model, e.Log, "round %d, delivery %d", round, i)
			whCheckRefs(t, hk)
		}
		hk.Mu.Unlock()
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
	hk.Mu.Lock()
	retry := hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
	whAttemptDue(hk, 500) // one failed attempt; the retry is scheduled
	retry.NextAt = time.Now().Add(time.Hour).UnixNano()
	heap.Fix(&hk.Sched, retry.Index) // and stays scheduled while the test runs
	var queued []*webhook.Delivery
	for range webhook.PerEndpointInFlight + 1 { // fill e's places, and one more waits
		queued = append(queued, hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`))))
	}
	hk.AdvanceLocked(time.Now())
	require.Len(t, hk.Ready, webhook.PerEndpointInFlight)
	require.Len(t, e.Waiting, 1)
	require.Len(t, hk.Sched, 1)
	hk.Mu.Unlock()
	require.NoError(t, hk.Persist(t.Context())) // nothing left to write
	hk.Mu.Lock()

	e.Enabled = false
	hk.DropQueuedLocked(e, webhook.DropAll)
	for i, d := range append(queued, retry) {
		assert.Equal(t, webhook.StatusFailed, d.Status, "delivery %d", i)
	}
	assert.Empty(t, queued[0].Attempts, "failed without an attempt")
	assert.Len(t, retry.Attempts, 1)
	assert.Empty(t, hk.Ready)
	assert.Empty(t, e.Waiting)
	assert.Empty(t, hk.Sched)
	assert.Zero(t, e.Inflight, "every place is given back")
	assert.NotEmpty(t, hk.Touched, "what changed is to be written")

	test := hk.RetryLocked(e, hk.NewEventLocked(webhook.EventTest, []byte(`{}`))) // made explicitly, as the test call is
	hk.AdvanceLocked(time.Now())
	j := hk.TakeLocked(time.Now())
	require.NotNil(t, j, "an explicit test call still goes")
	assert.Same(t, test, j.D)
	hk.FinishLocked(j, egress.Result{Status: 500})
	assert.Equal(t, webhook.StatusFailed, test.Status, "and is not retried")
	assert.Empty(t, hk.Sched)
	whCheckRefs(t, hk)
	hk.Mu.Unlock()

	hk2 := whReloaded(t, hk)
	for _, d := range append(queued, retry, test) {
		assert.Equal(t, webhook.StatusFailed, hk2.Deliv[d.ID].Status)
	}
	assert.Empty(t, hk2.Sched, "nothing is scheduled again after a restart")
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
	e.Events = []string{webhook.EventOrderStatus, webhook.EventTest}
	hk.Mu.Lock()
	retry := hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
	whAttemptDue(hk, 500) // one failed attempt; the retry is scheduled
	retry.NextAt = time.Now().Add(time.Hour).UnixNano()
	heap.Fix(&hk.Sched, retry.Index)
	var orders []*webhook.Delivery
	for range webhook.PerEndpointInFlight {
		orders = append(orders, hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`))))
	}
	hk.AdvanceLocked(time.Now())
	underWay := hk.TakeLocked(time.Now()) // the first order's attempt is under way
	require.NotNil(t, underWay)
	test := hk.RetryLocked(e, hk.NewEventLocked(webhook.EventTest, []byte(`{}`))) // made explicitly, as the test call is
	waiting := hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
	hk.AdvanceLocked(time.Now())
	require.Len(t, hk.Ready, webhook.PerEndpointInFlight-1)
	require.Equal(t, []*webhook.Delivery{test, waiting}, e.Waiting)

	e.Events = []string{webhook.EventTest}
	hk.DropQueuedLocked(e, e.RefusesLocked)
	for i, d := range append(orders[1:], retry, waiting) {
		assert.Equal(t, webhook.StatusFailed, d.Status, "order delivery %d", i)
	}
	assert.Equal(t, webhook.StatusPending, underWay.D.Status, "an attempt under way finishes")
	assert.Empty(t, hk.Sched)
	assert.Equal(t, []*webhook.Delivery{test}, hk.Ready, "the test call takes a freed place")
	assert.Empty(t, e.Waiting)
	assert.Equal(t, 2, e.Inflight, "the attempt under way and the test call")

	hk.FinishLocked(underWay, egress.Result{Status: 500})
	assert.Equal(t, webhook.StatusFailed, underWay.D.Status, "and takes no retry")
	j := hk.TakeLocked(time.Now())
	require.NotNil(t, j)
	assert.Same(t, test, j.D)
	hk.FinishLocked(j, egress.Result{Status: 500})
	assert.Equal(t, webhook.StatusPending, test.Status, "the test call is retried: the endpoint takes it")
	assert.Zero(t, e.Inflight, "every place is given back")
	whCheckRefs(t, hk)
	hk.Mu.Unlock()

	hk2 := whReloaded(t, hk)
	for _, d := range append(orders, retry, waiting) {
		assert.Equal(t, webhook.StatusFailed, hk2.Deliv[d.ID].Status)
	}
	assert.Equal(t, webhook.StatusPending, hk2.Deliv[test.ID].Status)
}

// TestDisabledEndpointAfterRestart: an attempt under way when its endpoint
// was disabled is left pending by the shutdown (or a crash) and comes back
// with the state. After the restart it is failed, not sent, unless it was
// asked for explicitly (the test call, a manual retry) while the endpoint
// was disabled: such one goes once.
func TestDisabledEndpointAfterRestart(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	e := eps[0]
	hk.Mu.Lock()
	published := hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
	asked := hk.RetryLocked(e, hk.NewEventLocked(webhook.EventTest, []byte(`{}`))) // while enabled
	hk.AdvanceLocked(time.Now())
	require.Len(t, hk.Ready, 2)
	// Both are taken by workers; the endpoint is disabled meanwhile; a
	// test call is made while it is disabled and taken too; the shutdown
	// cancels all three attempts, which leaves them pending.
	j1, j2 := hk.TakeLocked(time.Now()), hk.TakeLocked(time.Now())
	e.Enabled = false
	hk.DropQueuedLocked(e, webhook.DropAll)
	whileDisabled := hk.RetryLocked(e, hk.NewEventLocked(webhook.EventTest, []byte(`{}`)))
	hk.AdvanceLocked(time.Now())
	j3 := hk.TakeLocked(time.Now())
	require.NotNil(t, j3, "a test call made while the endpoint is disabled goes")
	hk.FinishLocked(j1, egress.Result{Err: context.Canceled})
	hk.FinishLocked(j2, egress.Result{Err: context.Canceled})
	hk.FinishLocked(j3, egress.Result{Err: context.Canceled})
	for _, d := range []*webhook.Delivery{published, asked, whileDisabled} {
		require.Equal(t, webhook.StatusPending, d.Status)
	}
	hk.Mu.Unlock()

	hk2 := whReloaded(t, hk)
	hk2.AdvanceLocked(time.Now())
	assert.Equal(t, webhook.StatusFailed, hk2.Deliv[published.ID].Status, "a published delivery is not sent to a disabled endpoint")
	assert.Equal(t, webhook.StatusFailed, hk2.Deliv[asked.ID].Status, "a test call made while the endpoint was enabled, cut short, is not sent once it is disabled")
	j := hk2.TakeLocked(time.Now())
	require.NotNil(t, j, "the test call made while the endpoint was disabled goes")
	assert.Equal(t, whileDisabled.ID, j.D.ID)
	assert.Nil(t, hk2.TakeLocked(time.Now()))
}

// TestAbandonedAttemptScheduledAgain: an attempt given up unrecorded (the
// service stopping, or the edge host giving up the requests of an
// instance it replaced) leaves its delivery scheduled, due at once, so the
// next round sends it; before, it stayed pending in no queue until a
// restart.
func TestAbandonedAttemptScheduledAgain(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	d := hk.EnqueueLocked(eps[0], hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{}`)))
	hk.AdvanceLocked(time.Now())
	j := hk.TakeLocked(time.Now())
	require.NotNil(t, j)
	hk.FinishLocked(j, egress.Result{Err: context.Canceled})
	assert.Equal(t, webhook.StatusPending, d.Status)
	assert.Empty(t, d.Attempts, "not recorded")
	assert.Zero(t, eps[0].Inflight, "its place is given back")
	require.GreaterOrEqual(t, d.Index, 0, "scheduled again")
	hk.AdvanceLocked(time.Now())
	again := hk.TakeLocked(time.Now())
	require.NotNil(t, again, "due at once")
	assert.Same(t, d, again.D)
}

// TestEventBodySurvivesSave: an event's body is kept byte for byte across
// a save and a load (API.md §5.1, "body exactly"), <, > and & included,
// which json.Marshal would escape.
func TestEventBodySurvivesSave(t *testing.T) {
	hk, eps := whHooks(t, whFast(), 1)
	body := []byte(`{"id":"evt_1","data":{"object":{"id":"<b>A&B</b>","note":"a\u0026b é"}}}`)
	hk.Mu.Lock()
	d := hk.EnqueueLocked(eps[0], hk.NewEventLocked(webhook.EventOrderStatus, body))
	got := string(d.Ev.Body)
	hk.Mu.Unlock()
	hk2 := whReloaded(t, hk)
	if after := string(hk2.Deliv[d.ID].Ev.Body); after != got {
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
		end  func(hk *webhook.Hooks, e *webhook.Endpoint)
	}{
		{"answered 200", func(hk *webhook.Hooks, e *webhook.Endpoint) { whAttemptDue(hk, 200) }},
		{"out of retries", func(hk *webhook.Hooks, e *webhook.Endpoint) {
			for range len(hk.Cfg.Webhooks.RetrySchedule) + 1 {
				for _, d := range e.Log { // each retry due now
					if d.Index >= 0 {
						d.NextAt = time.Now().UnixNano()
						heap.Fix(&hk.Sched, d.Index)
					}
				}
				whAttemptDue(hk, 500)
			}
		}},
		{"endpoint disabled", func(hk *webhook.Hooks, e *webhook.Endpoint) {
			e.Enabled = false
			hk.DropQueuedLocked(e, webhook.DropAll)
		}},
		{"type no longer taken", func(hk *webhook.Hooks, e *webhook.Endpoint) {
			e.Events = []string{webhook.EventTest}
			hk.AdvanceLocked(time.Now())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conf := whFast()
			conf.LogSize = 2
			hk, eps := whHooks(t, conf, 1)
			e := eps[0]
			hk.Mu.Lock()
			defer hk.Mu.Unlock()
			for range 3 {
				hk.EnqueueLocked(e, hk.NewEventLocked(webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`)))
			}
			require.Len(t, e.Log, 3, "pending deliveries stay beyond the size")
			tt.end(hk, e)
			for _, d := range e.Log {
				require.NotEqual(t, webhook.StatusPending, d.Status, "%s is still pending", d.ID)
			}
			assert.Len(t, e.Log, 2, "the log once they ended")
			assert.Equal(t, 2, e.Finished)
			whCheckRefs(t, hk)
		})
	}
}

// TestIdempotencyKeysLeaveTheBudget: keys that expire at a tick give their
// room in the store's budget back, and a restart counts what it restores.
func TestIdempotencyKeysLeaveTheBudget(t *testing.T) {
	hk, _ := whHooks(t, whFast(), 1)
	hk.Budget.Idem = 2
	for _, k := range []string{"k1", "k2"} {
		_, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), k)
		require.True(t, ok, "publish with %s", k)
	}
	_, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "k3")
	require.False(t, ok, "a third key past a budget of two")

	restored := whReloaded(t, hk)
	assert.Equal(t, 2, restored.IdemCount[whStoreA], "keys counted at a restart")
	whCheckRefs(t, restored)

	require.NoError(t, hk.Tick(time.Now().Add(webhook.IdempotencyTTL+time.Second)))
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	assert.Zero(t, hk.IdemCount[whStoreA], "after the keys expired")
	whCheckRefs(t, hk)
	hk.Mu.Unlock()
	_, ok = hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "k3")
	hk.Mu.Lock()
	assert.True(t, ok, "a new key once the old ones expired")
}

// TestIdempotencyKeyAgainAfterItExpired publishes with a key whose entry
// expired but was not swept yet: it is remembered afresh, and the sweep of
// its first expiry leaves the new entry alone.
func TestIdempotencyKeyAgainAfterItExpired(t *testing.T) {
	hk, _ := whHooks(t, whFast(), 1)
	obj := []byte(`{"id":"o1","status":"pending"}`)
	first, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, obj, "k1")
	require.True(t, ok)
	hk.Mu.Lock()
	e := hk.Idem[whStoreA+"\x00k1"]
	e.Expires = time.Now().Unix() - 1 // expired, not yet swept
	hk.Idem[whStoreA+"\x00k1"] = e
	hk.IdemQueue[0].Expires = e.Expires
	hk.Mu.Unlock()

	second, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, obj, "k1")
	require.True(t, ok)
	require.NotEqual(t, first, second, "an expired key publishes anew")
	require.NoError(t, hk.Tick(time.Now())) // sweeps the first expiry
	again, _ := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, obj, "k1")
	assert.Equal(t, second, again, "the key's new entry survived the sweep of its old one")
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	assert.Equal(t, 1, hk.IdemCount[whStoreA])
	assert.Len(t, hk.IdemQueue, 1, "the swept entry left the queue")
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
	hkA.Mu.Lock()
	assert.Empty(t, hkA.Endpoints, "store B's endpoint is not served")
	assert.Empty(t, hkA.Sched, "nor its delivery sent")
	whCheckRefs(t, hkA)
	hkA.Mu.Unlock()
	require.NoError(t, hkA.Persist(t.Context())) // a write without B configured keeps it

	back := whLoaded(t, conf)
	back.Mu.Lock()
	defer back.Mu.Unlock()
	e := back.Endpoints[eB.ID]
	require.NotNil(t, e, "store B's endpoint, once B is configured again")
	assert.Equal(t, eB.Secret, e.Secret)
	require.Len(t, e.Log, 1)
	assert.Equal(t, evt, e.Log[0].EventID)
	assert.Equal(t, webhook.StatusPending, e.Log[0].Status)
	assert.Len(t, back.Sched, 1, "its pending delivery is scheduled again")
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
	path := filepath.Join(conf.DataDir, webhook.HooksFileName)
	writeEarlierHooksFile(t, hk, path)
	editSavedHooks(t, path, func(state []byte) []byte {
		return bytes.ReplaceAll(state, []byte(whStoreA), []byte(strings.ToUpper(whStoreA)))
	})

	back := whReloaded(t, whImported(t, conf)) // and written again
	e := back.Endpoints[eA.ID]
	require.NotNil(t, e)
	assert.Equal(t, whStoreA, e.StoreID, "the endpoint's store, in its one spelling")
	assert.Equal(t, []*webhook.Endpoint{e}, back.ByStore[whStoreA])
	assert.Empty(t, back.Parked.Endpoints)
	assert.Contains(t, back.Idem, whStoreA+"\x00k1")
	assert.Equal(t, 1, back.IdemCount[whStoreA])
	whCheckRefs(t, back)
}

// TestExpiredKeyLeavesTheIndex: an Idempotency-Key that expires while the
// service is down leaves the index of keys at the next persist after the
// start, as it would have had the service been running; kept, every
// later start would read it again.
func TestExpiredKeyLeavesTheIndex(t *testing.T) {
	st, clock := shStore(t)
	started := func() *webhook.Hooks {
		c := whFast()
		c.DataDir = t.TempDir()
		hk := webhook.NewHooks(whParseConfig(t, c))
		hk.St = st
		require.NoError(t, hk.LoadStore(t.Context()))
		return hk
	}
	hk := started()
	_, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "k1")
	require.True(t, ok)
	require.NoError(t, hk.Persist(t.Context()))
	keys := func() []store.Scored {
		ids, err := st.ZRange(t.Context(), webhook.HookIndex("idem"), math.MinInt64, math.MaxInt64, 0, false)
		require.NoError(t, err)
		return ids
	}
	require.Len(t, keys(), 1, "the key, listed")

	clock.off.Add(int64(25 * time.Hour)) // down past the key's 24 hours
	require.NoError(t, started().Persist(t.Context()))
	assert.Empty(t, keys(), "the key, expired while the service was down")
}

// hkPublish publishes an order event's object on hk as a request does
// (written before it returns); false when the store is over its budget.
func hkPublish(t *testing.T, hk *webhook.Hooks, store, typ string, object []byte, key string) (string, bool) {
	t.Helper()
	evt, err := hk.Publish(t.Context(), store, typ, object, key)
	if errors.Is(err, webhook.ErrOverBudget) {
		return "", false
	}
	require.NoError(t, err)
	return evt, true
}
