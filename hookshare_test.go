package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/egress"
	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/webhook"
)

// White-box tests of replicas sharing the webhook state (share.go):
// hooks of two replicas, A and B, without dispatchers, on one store (the
// embedded one in memory: the contract is the same as Redis's), on a
// clock the test moves.

// shStore is a store in memory for replicas to share, on its clock.
func shStore(t *testing.T) (store.Store, *testClock) {
	t.Helper()
	c := &testClock{}
	db, err := embedded.Open("", embedded.Options{Now: c.now})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, c
}

// shReplica starts a replica's hooks on st, as a start does; its log
// goes to the buffer returned.
func shReplica(t *testing.T, st store.Store) (*webhook.Hooks, *bytes.Buffer) {
	t.Helper()
	return shReplicaLog(t, st, 0)
}

// shReplicaLog is shReplica keeping logSize deliveries an endpoint (the
// default when 0).
func shReplicaLog(t *testing.T, st store.Store, logSize int) (*webhook.Hooks, *bytes.Buffer) {
	t.Helper()
	c := whFast()
	c.LogSize = logSize
	c.DataDir = t.TempDir() // unused: the state is in st
	hk := webhook.NewHooks(whParseConfig(t, c))
	var log bytes.Buffer
	hk.Log = slog.New(slog.NewTextHandler(&log, nil))
	hk.St = st
	require.NoError(t, hk.ShareWith(t.Context(), st, ""))
	require.NoError(t, hk.LoadStore(t.Context()))
	return hk, &log
}

// change makes f's change on hk as a request does: under the lock, on
// the state caught up, written before it returns.
func change(t *testing.T, hk *webhook.Hooks, f func()) {
	t.Helper()
	require.NoError(t, hk.Locked(t.Context(), func() {
		hk.Mu.Lock()
		defer hk.Mu.Unlock()
		f()
	}))
}

func shCounter(t *testing.T, st store.Store) int64 {
	t.Helper()
	n, err := webhook.Counter(t.Context(), st, webhook.ShareGen)
	require.NoError(t, err)
	return n
}

func TestSharedEndpointChanges(t *testing.T) {
	st, _ := shStore(t)
	a, _ := shReplica(t, st)
	b, _ := shReplica(t, st)
	var id string
	change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
	require.NoError(t, b.Fresh(t.Context()))
	eb := b.Endpoints[id]
	require.NotNil(t, eb, "B's copy of the endpoint made on A")
	assert.Equal(t, a.Endpoints[id].Secret, eb.Secret)
	assert.Len(t, b.ByStore[whStoreA], 1)

	// Taking a change in writes nothing back.
	gen := shCounter(t, st)
	require.NoError(t, b.Sync(t.Context()))
	assert.Equal(t, gen, shCounter(t, st), "the feed's counter after B's sync")

	change(t, b, func() {
		e := b.Endpoints[id]
		e.Secret, e.URL = webhook.NewSecret(), "https://rotated.example.com/"
		b.TouchLocked(webhook.KindEndpoint, id)
	})
	require.NoError(t, a.Fresh(t.Context()))
	assert.Equal(t, b.Endpoints[id].Secret, a.Endpoints[id].Secret, "A's secret after B rotated it")
	assert.Equal(t, "https://rotated.example.com/", a.Endpoints[id].URL)

	change(t, b, func() { b.RemoveEndpointLocked(b.Endpoints[id]) })
	require.NoError(t, a.Fresh(t.Context()))
	assert.Nil(t, a.Endpoints[id], "A's copy after B deleted it")
	assert.Empty(t, a.ByStore[whStoreA])
}

// TestSharedDeliveriesSentByTheLeader: an event published on the
// follower is sent by the leader alone, and the follower's copy shows
// how it went; the leader's lease, given up or run out, goes to the
// other, which sends what is pending.
func TestSharedDeliveriesSentByTheLeader(t *testing.T) {
	st, clock := shStore(t)
	a, _ := shReplica(t, st)
	b, _ := shReplica(t, st)
	ctx := t.Context()
	a.Lead(ctx, clock.now())
	b.Lead(ctx, clock.now())
	require.True(t, a.Leading, "A leads: the lease was free")
	require.False(t, b.Leading, "B leads too")

	var evt string
	change(t, b, func() { whAddEndpoint(b, whStoreA) })
	evt, ok := hkPublish(t, b, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "key-1")
	require.True(t, ok)
	b.Mu.Lock()
	assert.Zero(t, b.AdvanceLocked(clock.now().Add(time.Hour)), "the follower's next due delivery")
	assert.Nil(t, b.TakeLocked(clock.now()), "a job of the follower")
	b.Mu.Unlock()

	require.NoError(t, a.Fresh(ctx))
	a.Mu.Lock()
	require.Len(t, a.Deliv, 1, "A's deliveries")
	whAttemptDue(a, 200)
	a.Mu.Unlock()
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Fresh(ctx))
	for id, d := range b.Deliv {
		assert.Equal(t, webhook.StatusSucceeded, d.Status, "B's copy of %s", id)
		assert.Len(t, d.Attempts, 1, "B's copy of %s", id)
		assert.Equal(t, evt, d.EventID)
		assert.Equal(t, -1, d.Index, "B's copy of %s is scheduled", id)
	}
	// The key published on B is known to A.
	again, ok := hkPublish(t, a, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "key-1")
	require.True(t, ok)
	assert.Equal(t, evt, again, "publishing key-1 again on A")

	// A pending delivery, its attempt under way on A, when A gives the
	// lease up: cancelled, it stays pending, and B, leading, sends it.
	var dlv string
	change(t, b, func() {
		d := b.RetryLocked(b.ByStore[whStoreA][0], b.Events[evt])
		dlv = d.ID
	})
	require.NoError(t, a.Fresh(ctx))
	a.Mu.Lock()
	a.AdvanceLocked(clock.now())
	j := a.TakeLocked(clock.now())
	require.NotNil(t, j, "A's job")
	a.Mu.Unlock()
	a.Release(ctx)
	a.Mu.Lock()
	a.FinishLocked(j, egress.Result{Err: context.Canceled})
	assert.Empty(t, a.Deliv[dlv].Attempts, "the cancelled attempt is recorded")
	a.Mu.Unlock()

	b.Lead(ctx, clock.now())
	require.True(t, b.Leading, "B leads once A gave the lease up")
	a.Lead(ctx, clock.now())
	require.False(t, a.Leading, "A leads again")
	b.Mu.Lock()
	whAttemptDue(b, 200)
	assert.Equal(t, webhook.StatusSucceeded, b.Deliv[dlv].Status)
	b.Mu.Unlock()

	// B dies: its lease runs out, and A takes it.
	clock.off.Add(int64(b.LeaseTTL() + time.Second))
	a.Lead(ctx, clock.now())
	assert.True(t, a.Leading, "A leads once B's lease ran out")
	b.Lead(ctx, clock.now()) // B, back, finds its lease taken: it stops sending
	assert.False(t, b.Leading, "B leads after its lease was taken")
}

// TestSharedStateReadAgain: a replica whose changes feed cannot tell it
// what changed (the store lost its data, or the entries it had not
// taken in were dropped) reads the whole state again.
func TestSharedStateReadAgain(t *testing.T) {
	t.Run("feed trimmed", func(t *testing.T) {
		st, clock := shStore(t)
		a, _ := shReplica(t, st)
		b, blog := shReplica(t, st)
		ctx := t.Context()
		var ids []string
		start := clock.now()
		for i := range 12 { // feedTrim apart: past feedKeep
			now := start.Add(time.Duration(i) * webhook.FeedTrim)
			change(t, a, func() { ids = append(ids, whAddEndpoint(a, whStoreA).ID) })
			require.NoError(t, a.TrimFeed(ctx, now))
			if len(ids) == webhook.MaxEndpointsPerStore {
				change(t, a, func() {
					for _, e := range slices.Clone(a.ByStore[whStoreA][:4]) {
						a.RemoveEndpointLocked(e)
					}
				})
			}
		}
		floor, err := webhook.Counter(ctx, st, webhook.ShareFloor)
		require.NoError(t, err)
		require.Positive(t, floor, "the feed's floor")
		left, err := st.ZRange(ctx, webhook.ShareFeed, math.MinInt64, floor, 0, false)
		require.NoError(t, err)
		assert.Empty(t, left, "entries at or below the floor")

		require.NoError(t, b.Fresh(ctx))
		assert.Contains(t, blog.String(), "reading the shared webhook state again")
		assert.Equal(t, keysOf(a.Endpoints), keysOf(b.Endpoints), "B's endpoints")
		blog.Reset()
		change(t, a, func() { whAddEndpoint(a, whStoreA) })
		require.NoError(t, b.Fresh(ctx))
		assert.Equal(t, keysOf(a.Endpoints), keysOf(b.Endpoints), "B's endpoints after one more")
		assert.NotContains(t, blog.String(), "again", "B's log when it was not behind")
	})

	t.Run("store emptied", func(t *testing.T) {
		st, _ := shStore(t)
		a, _ := shReplica(t, st)
		b, blog := shReplica(t, st)
		ctx := t.Context()
		var id string
		change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
		require.NoError(t, b.Fresh(ctx))
		require.NotNil(t, b.Endpoints[id])
		// What Redis restarted without persistence holds: nothing.
		feed, err := st.ZRange(ctx, webhook.ShareFeed, math.MinInt64, math.MaxInt64, 0, false)
		require.NoError(t, err)
		ws := []store.Write{{Key: webhook.ShareGen}, {Key: webhook.ShareEpoch}, {Key: webhook.HookKey(webhook.KindEndpoint, id)}, {Key: webhook.HookIndex(webhook.KindEndpoint), Member: id}}
		for _, m := range feed {
			ws = append(ws, store.Write{Key: webhook.ShareFeed, Member: m.Member})
		}
		require.NoError(t, st.Apply(ctx, ws))
		change(t, a, func() { whAddEndpoint(a, whStoreB) }) // counter 1: below what B saw
		require.NoError(t, b.Fresh(ctx))
		assert.Contains(t, blog.String(), "reading the shared webhook state again")
		assert.Nil(t, b.Endpoints[id], "B's copy of an endpoint the store lost")
		assert.Len(t, b.ByStore[whStoreB], 1, "B's endpoints of store B")
	})

	// The leader's marks of the counter, for trimming the feed, are of
	// the counter before the store lost its data: a floor made of one
	// would be above the new counter, and send every replica to read the
	// whole state again at each change.
	t.Run("store emptied, the feed trimmed after", func(t *testing.T) {
		st, clock := shStore(t)
		a, _ := shReplica(t, st)
		ctx := t.Context()
		start := clock.now()
		for i := range 5 {
			change(t, a, func() { whAddEndpoint(a, whStoreA) })
			require.NoError(t, a.TrimFeed(ctx, start.Add(time.Duration(i)*webhook.FeedTrim)))
		}
		feed, err := st.ZRange(ctx, webhook.ShareFeed, math.MinInt64, math.MaxInt64, 0, false)
		require.NoError(t, err)
		ws := []store.Write{{Key: webhook.ShareGen}, {Key: webhook.ShareEpoch}, {Key: webhook.ShareFloor}}
		for _, m := range feed {
			ws = append(ws, store.Write{Key: webhook.ShareFeed, Member: m.Member})
		}
		require.NoError(t, st.Apply(ctx, ws))
		change(t, a, func() { whAddEndpoint(a, whStoreB) })
		require.NoError(t, a.TrimFeed(ctx, start.Add(1000*webhook.FeedTrim)))
		floor, err := webhook.Counter(ctx, st, webhook.ShareFloor)
		require.NoError(t, err)
		gen, err := webhook.Counter(ctx, st, webhook.ShareGen)
		require.NoError(t, err)
		assert.LessOrEqual(t, floor, gen, "the feed's floor, against the counter that started again")
	})
}

func keysOf[V any](m map[string]V) map[string]bool {
	k := map[string]bool{}
	for id := range m {
		k[id] = true
	}
	return k
}

// TestSharedLockOneHolder: of replicas changing at once, each change is
// made on the state the one before left: a counter in the state counts
// every increment.
func TestSharedLockOneHolder(t *testing.T) {
	st, _ := shStore(t)
	var eps []*webhook.Hooks
	for range 3 {
		hk, _ := shReplica(t, st)
		eps = append(eps, hk)
	}
	var id string
	change(t, eps[0], func() { id = whAddEndpoint(eps[0], whStoreA).ID })
	const n = 20
	done := make(chan error)
	for _, hk := range eps {
		go func() {
			for range n {
				err := hk.Locked(t.Context(), func() {
					hk.Mu.Lock()
					e := hk.Endpoints[id]
					k, _ := strconv.Atoi(e.Description)
					e.Description = strconv.Itoa(k + 1)
					hk.TouchLocked(webhook.KindEndpoint, id)
					hk.Mu.Unlock()
				})
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range eps {
		require.NoError(t, <-done)
	}
	for i, hk := range eps {
		require.NoError(t, hk.Fresh(t.Context()))
		assert.Equal(t, strconv.Itoa(n*len(eps)), hk.Endpoints[id].Description, "the count on replica %d", i)
	}
}

// gatedStore holds the first call that gate picks until open is closed,
// and closes entered when that call comes.
type gatedStore struct {
	store.Store
	gate          func(op, key string) bool
	entered, open chan struct{}
	held          atomic.Bool
}

func newGatedStore(st store.Store, gate func(op, key string) bool) *gatedStore {
	return &gatedStore{Store: st, gate: gate, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gatedStore) wait(op, key string) {
	if !g.gate(op, key) || !g.held.CompareAndSwap(false, true) {
		return // not picked, or not the first
	}
	close(g.entered)
	<-g.open
}

func (g *gatedStore) ZRange(ctx context.Context, set string, min, max int64, limit int, rev bool) ([]store.Scored, error) {
	g.wait("ZRange", set)
	return g.Store.ZRange(ctx, set, min, max, limit, rev)
}

func (g *gatedStore) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	g.wait("CompareAndSwap", key)
	return g.Store.CompareAndSwap(ctx, key, old, val, exp)
}

// TestSharedLockJoins: a change joins a hold of the lock only once its
// taker has caught the copy up, and not once its last holder lets it go.
func TestSharedLockJoins(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel() // a change that would have to wait gives up at once

	t.Run("not while the taker catches up", func(t *testing.T) {
		st, _ := shStore(t)
		a, _ := shReplica(t, st)
		g := newGatedStore(st, func(op, key string) bool { return op == "ZRange" && key == webhook.ShareFeed })
		b, _ := shReplica(t, g)
		var id string
		change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
		taken := make(chan func())
		go func() {
			_, unlock, err := b.Lock(t.Context())
			assert.NoError(t, err)
			taken <- unlock
		}()
		<-g.entered // the taker reads the feed
		if _, unlock, err := b.Lock(cancelled); err == nil {
			unlock()
			t.Errorf("a change joined the hold before the copy caught up")
		}
		close(g.open)
		(<-taken)()
		_, unlock, err := b.Lock(t.Context())
		require.NoError(t, err)
		b.Mu.Lock()
		assert.NotNil(t, b.Endpoints[id], "the copy under the lock holds A's endpoint")
		b.Mu.Unlock()
		unlock()
	})

	t.Run("not while it is let go", func(t *testing.T) {
		st, _ := shStore(t)
		g := newGatedStore(st, func(op, key string) bool { return op == "CompareAndSwap" && key == webhook.ShareLock })
		b, _ := shReplica(t, g)
		_, unlock, err := b.Lock(t.Context())
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { unlock(); close(done) }()
		<-g.entered // the last holder lets the store's lock go
		if _, unlock, err := b.Lock(cancelled); err == nil {
			unlock()
			t.Errorf("a change joined a hold being let go")
		}
		close(g.open)
		<-done
		// Another replica takes it now, and this one after it.
		c, _ := shReplica(t, st)
		_, unlockC, err := c.Lock(t.Context())
		require.NoError(t, err)
		unlockC()
		_, unlock, err = b.Lock(t.Context())
		require.NoError(t, err)
		unlock()
	})
}

// TestSharedFailureWindowKept: the leader's failure window, opened by an
// attempt and not yet written, outlives a follower's write of the
// endpoint (a publish moves its NextSeq); a follower's PATCH that
// enables it again closes it.
func TestSharedFailureWindowKept(t *testing.T) {
	st, clock := shStore(t)
	a, _ := shReplica(t, st)
	b, _ := shReplica(t, st)
	a.Lead(t.Context(), clock.now())
	require.True(t, a.Leading)
	var id string
	change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
	require.NoError(t, b.Fresh(t.Context()))
	a.Mu.Lock()
	a.NoteAttemptLocked(a.Endpoints[id], false)
	since := a.Endpoints[id].FailingSince
	a.Mu.Unlock()
	require.NotZero(t, since)

	change(t, b, func() { b.Endpoints[id].NextSeq++; b.TouchLocked(webhook.KindEndpoint, id) })
	require.NoError(t, a.Sync(t.Context()))
	assert.Equal(t, since, a.Endpoints[id].FailingSince, "the leader's failure window after a follower's write")
	require.NoError(t, b.Fresh(t.Context()))
	assert.Equal(t, since, b.Endpoints[id].FailingSince, "the follower's copy of it")

	// Disabled and enabled again on B: the window closes.
	for _, on := range []bool{false, true} {
		_, err := b.ChangeEndpoint(t.Context(), whStoreA, id, webhook.EndpointChange{Enabled: &on})
		require.NoError(t, err)
		require.NoError(t, a.Fresh(t.Context()))
	}
	assert.Zero(t, a.Endpoints[id].FailingSince, "the leader's failure window after B enabled the endpoint again")
}

// TestSharedAttemptOfAnEndedLead: an attempt that ends after its
// replica stopped leading is not recorded there: its delivery waits,
// pending, for the next leader.
func TestSharedAttemptOfAnEndedLead(t *testing.T) {
	st, clock := shStore(t)
	a, _ := shReplica(t, st)
	ctx := t.Context()
	a.Lead(ctx, clock.now())
	require.True(t, a.Leading)
	change(t, a, func() { whAddEndpoint(a, whStoreA) })
	shPublish(t, a)
	a.Mu.Lock()
	a.AdvanceLocked(clock.now())
	j := a.TakeLocked(clock.now())
	a.Mu.Unlock()
	require.NotNil(t, j)
	a.Release(ctx)
	a.Mu.Lock()
	defer a.Mu.Unlock()
	a.FinishLocked(j, egress.Result{Status: 200})
	assert.Empty(t, j.D.Attempts, "attempts recorded")
	assert.Equal(t, webhook.StatusPending, j.D.Status)
	assert.GreaterOrEqual(t, j.D.Index, 0, "the delivery's place in the schedule")
	assert.Nil(t, a.TakeLocked(clock.now()), "a job taken by the follower")
}

// applyGate holds the first Apply made once armed, until open is closed.
type applyGate struct {
	store.Store
	armed         atomic.Bool
	entered, open chan struct{}
}

func (g *applyGate) Apply(ctx context.Context, ws []store.Write) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.open
	}
	return g.Store.Apply(ctx, ws)
}

// shPublish publishes an order event on hk as a request does.
func shPublish(t *testing.T, hk *webhook.Hooks) string {
	t.Helper()
	evt, ok := hkPublish(t, hk, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "")
	require.True(t, ok)
	return evt
}

// shDeliveryOf is hk's delivery of evt, or nil.
func shDeliveryOf(hk *webhook.Hooks, evt string) *webhook.Delivery {
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	for _, d := range hk.Deliv {
		if d.EventID == evt {
			return d
		}
	}
	return nil
}

// TestSharedStaleLeader: a leader paused past its lease, while another
// took it over and delivered, writes nothing of that delivery when it
// resumes (its attempt's outcome is dropped), takes the other's record
// in once it has stepped down, and does not send it again when it leads
// again.
func TestSharedStaleLeader(t *testing.T) {
	st, clock := shStore(t)
	a, _ := shReplica(t, st)
	b, _ := shReplica(t, st)
	ctx := t.Context()
	a.Lead(ctx, clock.now())
	require.True(t, a.Leading)
	change(t, a, func() { whAddEndpoint(a, whStoreA) })
	evt := shPublish(t, a)
	a.Mu.Lock()
	a.AdvanceLocked(time.Now())
	j := a.TakeLocked(time.Now())
	a.Mu.Unlock()
	require.NotNil(t, j)
	a.Mu.Lock()
	a.SendUntil = time.Now() // A paused past its lease (its own clock's margin passed)
	a.Mu.Unlock()
	clock.off.Add(int64(a.LeaseTTL() + time.Second))

	b.Lead(ctx, clock.now())
	require.True(t, b.Leading, "B takes the lapsed lease")
	b.Mu.Lock()
	whAttemptDue(b, 200)
	b.Mu.Unlock()
	require.NoError(t, b.Sync(ctx))

	// A resumes: its scheduler catches up, its attempt ends, a request
	// on A writes what A changed, then A's tick finds the lease taken.
	require.NoError(t, a.CatchUp(ctx, false))
	a.Mu.Lock()
	a.FinishLocked(j, egress.Result{Status: 500})
	a.Mu.Unlock()
	require.NoError(t, a.Sync(ctx))
	a.Lead(ctx, clock.now())
	require.False(t, a.Leading, "A leads after B took the lease")
	require.NoError(t, a.Sync(ctx))

	c, _ := shReplica(t, st)
	if d := shDeliveryOf(c, evt); assert.NotNil(t, d) {
		assert.Equal(t, webhook.StatusSucceeded, d.Status, "the stored delivery B made")
		assert.Len(t, d.Attempts, 1, "the stored delivery's attempts")
	}
	require.NoError(t, a.Fresh(ctx))
	da := shDeliveryOf(a, evt)
	require.NotNil(t, da)
	assert.Equal(t, webhook.StatusSucceeded, da.Status, "A's copy of the delivery B made")

	// B dies; A leads again, and has nothing of it to send.
	clock.off.Add(int64(b.LeaseTTL() + time.Second))
	a.Lead(ctx, clock.now())
	require.True(t, a.Leading)
	a.Mu.Lock()
	da = a.Deliv[da.ID]
	before := len(da.Attempts)
	whAttemptDue(a, 200)
	assert.Equal(t, before, len(da.Attempts), "attempts A made of a delivery B had delivered")
	a.Mu.Unlock()
}

// TestSharedStepDownKeepsRequestChanges: a delivery a request makes
// while the leader steps down (writing its outcomes first) is written
// with the request's own persist: what was answered 202 is in the store.
func TestSharedStepDownKeepsRequestChanges(t *testing.T) {
	st, clock := shStore(t)
	g := &applyGate{Store: st, entered: make(chan struct{}), open: make(chan struct{})}
	a, _ := shReplica(t, g)
	ctx := t.Context()
	a.Lead(ctx, clock.now())
	require.True(t, a.Leading)
	change(t, a, func() { whAddEndpoint(a, whStoreA) })
	shPublish(t, a)
	a.Mu.Lock()
	whAttemptDue(a, 500) // an outcome not yet written: the step-down writes it
	a.Mu.Unlock()

	g.armed.Store(true)
	done := make(chan struct{})
	go func() { a.Release(ctx); close(done) }()
	<-g.entered // the step-down's write, under its hold of the lock

	// A publish joins the hold (as one arriving within lockJoin does),
	// and makes its delivery while the step-down's write is under way;
	// its own persist then writes it, and it is answered.
	a.Share.Mu.Lock()
	a.Share.Cur.Since = time.Now()
	a.Share.Mu.Unlock()
	published := make(chan error, 1)
	var evt string
	go func() {
		var err error
		evt, err = a.Publish(ctx, whStoreA, webhook.EventOrderStatus, []byte(`{"id":"o2","status":"pending"}`), "k2")
		published <- err
	}()
	require.Eventually(t, func() bool {
		a.Mu.Lock()
		defer a.Mu.Unlock()
		return len(a.Deliv) == 2
	}, whWait, time.Millisecond, "the publish's delivery, made while the step-down writes")
	close(g.open)
	<-done
	require.NoError(t, <-published)

	c, _ := shReplica(t, st)
	assert.NotNil(t, shDeliveryOf(c, evt), "the stored delivery of the event answered 202")
	_, err := st.Get(ctx, webhook.HookKey(webhook.KindEvent, evt))
	assert.NoError(t, err, "the stored event answered 202")
}

// TestSharedPlaceOfAnEndedLead: an attempt of an ended leadership whose
// delivery the new leader trimmed meanwhile leaves its endpoint's count
// of attempts under way right when it ends.
func TestSharedPlaceOfAnEndedLead(t *testing.T) {
	st, clock := shStore(t)
	a, _ := shReplicaLog(t, st, 1)
	b, _ := shReplicaLog(t, st, 1)
	ctx := t.Context()
	a.Lead(ctx, clock.now())
	var id string
	change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
	shPublish(t, a)
	a.Mu.Lock()
	a.AdvanceLocked(time.Now())
	j := a.TakeLocked(time.Now())
	a.Mu.Unlock()
	require.NotNil(t, j)
	a.Release(ctx)

	b.Lead(ctx, clock.now())
	require.True(t, b.Leading)
	b.Mu.Lock()
	whAttemptDue(b, 200)
	b.Mu.Unlock()
	require.NoError(t, b.Sync(ctx))
	shPublish(t, b) // a log of 1: the delivered one goes
	require.NoError(t, a.Fresh(ctx))
	a.Mu.Lock()
	defer a.Mu.Unlock()
	require.Nil(t, a.Deliv[j.D.ID], "A's copy of the trimmed delivery")
	a.FinishLocked(j, egress.Result{Err: context.Canceled})
	assert.Zero(t, a.Endpoints[id].Inflight, "the endpoint's attempts under way on A")
}

// TestSharedOwnWriteNotTakenBack: a catch-up without the lock (a read)
// never takes the replica's own last write back in over a change a
// request under the lock has made and not yet written, even after a
// write that failed left a gap in the feed's counter.
func TestSharedOwnWriteNotTakenBack(t *testing.T) {
	st, _ := shStore(t)
	a, _ := shReplica(t, st)
	ctx := t.Context()
	var id string
	change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
	_, err := st.Add(ctx, webhook.ShareGen, 1, time.Time{}) // a write whose Apply then failed
	require.NoError(t, err)

	work, unlock1, err := a.Lock(ctx)
	require.NoError(t, err)
	a.Mu.Lock()
	a.Endpoints[id].URL = "https://one.example.com/"
	a.TouchLocked(webhook.KindEndpoint, id)
	a.Mu.Unlock()
	require.NoError(t, a.Persist(work))

	a.Share.Mu.Lock()
	a.Share.Cur.Since = time.Now() // a second request, within lockJoin
	a.Share.Mu.Unlock()
	_, unlock2, err := a.Lock(ctx)
	require.NoError(t, err)
	unlock1()
	a.Mu.Lock()
	a.Endpoints[id].URL = "https://two.example.com/" // answered 200 with this
	a.TouchLocked(webhook.KindEndpoint, id)
	a.Mu.Unlock()
	require.NoError(t, a.CatchUp(ctx, false)) // a read meanwhile
	require.NoError(t, a.Persist(work))
	unlock2()

	b, _ := shReplica(t, st)
	assert.Equal(t, "https://two.example.com/", b.Endpoints[id].URL, "the stored URL")
}

// TestClearLockOf: the lock is removed when the replica named holds it,
// and left to any other holder, one whose name only starts the same
// included.
func TestClearLockOf(t *testing.T) {
	const dead = "host/42/abcd/instance-1"
	for _, tt := range []struct {
		holder string // the lock's token; "" for no lock
		freed  bool
	}{
		{dead + "/7", true},
		{"host/42/abcd/instance-12/7", false},
		{"other/9/efgh/3", false},
		{"", true},
	} {
		st, _ := shStore(t)
		if tt.holder != "" {
			require.NoError(t, st.Put(t.Context(), webhook.ShareLock, []byte(tt.holder), time.Now().Add(time.Minute)))
		}
		require.NoError(t, webhook.ClearLockOf(t.Context(), st, dead))
		_, err := st.Get(t.Context(), webhook.ShareLock)
		if freed := errors.Is(err, store.ErrNotFound); freed != tt.freed {
			t.Errorf("ClearLockOf(%q) with the lock held by %q: freed %v; want %v", dead, tt.holder, freed, tt.freed)
		}
	}
}
