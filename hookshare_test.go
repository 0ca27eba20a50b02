package main

import (
	"bytes"
	"context"
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
)

// White-box tests of replicas sharing the webhook state (hookshare.go):
// hooks of two replicas, A and B, without dispatchers, on one store (the
// embedded one in memory: the contract is the same as Redis's), on a
// clock the test moves.

type shClock struct{ off atomic.Int64 }

func (c *shClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *shClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// shStore is a store in memory for replicas to share, on its clock.
func shStore(t *testing.T) (store.Store, *shClock) {
	t.Helper()
	c := &shClock{}
	db, err := embedded.Open("", embedded.Options{Now: c.now})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, c
}

// shReplica starts a replica's hooks on st, as a start does; its log
// goes to the buffer returned.
func shReplica(t *testing.T, st store.Store) (*hooks, *bytes.Buffer) {
	t.Helper()
	c := whFast()
	c.DataDir = t.TempDir() // unused: the state is in st
	hk := newHooks(whParseConfig(t, c))
	var log bytes.Buffer
	hk.log = slog.New(slog.NewTextHandler(&log, nil))
	hk.st = st
	require.NoError(t, hk.shareWith(t.Context(), st))
	require.NoError(t, hk.loadStore(t.Context()))
	return hk, &log
}

// change makes f's change on hk as a request does: under the lock, on
// the state caught up, written before it returns.
func change(t *testing.T, hk *hooks, f func()) {
	t.Helper()
	require.NoError(t, hk.locked(t.Context(), func() {
		hk.mu.Lock()
		defer hk.mu.Unlock()
		f()
	}))
}

func shCounter(t *testing.T, st store.Store) int64 {
	t.Helper()
	n, err := counter(t.Context(), st, shareGen)
	require.NoError(t, err)
	return n
}

func TestSharedEndpointChanges(t *testing.T) {
	st, _ := shStore(t)
	a, _ := shReplica(t, st)
	b, _ := shReplica(t, st)
	var id string
	change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
	require.NoError(t, b.catchUp(t.Context()))
	eb := b.endpoints[id]
	require.NotNil(t, eb, "B's copy of the endpoint made on A")
	assert.Equal(t, a.endpoints[id].Secret, eb.Secret)
	assert.Len(t, b.byStore[whStoreA], 1)

	// Taking a change in writes nothing back.
	gen := shCounter(t, st)
	require.NoError(t, b.sync(t.Context()))
	assert.Equal(t, gen, shCounter(t, st), "the feed's counter after B's sync")

	change(t, b, func() {
		e := b.endpoints[id]
		e.Secret, e.URL = newSecret(), "https://rotated.example.com/"
		b.touchLocked(kindEndpoint, id)
	})
	require.NoError(t, a.catchUp(t.Context()))
	assert.Equal(t, b.endpoints[id].Secret, a.endpoints[id].Secret, "A's secret after B rotated it")
	assert.Equal(t, "https://rotated.example.com/", a.endpoints[id].URL)

	change(t, b, func() { b.removeEndpointLocked(b.endpoints[id]) })
	require.NoError(t, a.catchUp(t.Context()))
	assert.Nil(t, a.endpoints[id], "A's copy after B deleted it")
	assert.Empty(t, a.byStore[whStoreA])
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
	a.lead(ctx, clock.now())
	b.lead(ctx, clock.now())
	require.True(t, a.leading, "A leads: the lease was free")
	require.False(t, b.leading, "B leads too")

	var evt string
	change(t, b, func() { whAddEndpoint(b, whStoreA) })
	require.NoError(t, b.locked(ctx, func() {
		var ok bool
		evt, ok = b.publish(whStoreA, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "key-1")
		require.True(t, ok)
	}))
	b.mu.Lock()
	assert.Zero(t, b.advanceLocked(clock.now().Add(time.Hour)), "the follower's next due delivery")
	assert.Nil(t, b.takeLocked(clock.now()), "a job of the follower")
	b.mu.Unlock()

	require.NoError(t, a.catchUp(ctx))
	a.mu.Lock()
	require.Len(t, a.deliv, 1, "A's deliveries")
	whAttemptDue(a, 200)
	a.mu.Unlock()
	require.NoError(t, a.sync(ctx))
	require.NoError(t, b.catchUp(ctx))
	for id, d := range b.deliv {
		assert.Equal(t, statusSucceeded, d.Status, "B's copy of %s", id)
		assert.Len(t, d.Attempts, 1, "B's copy of %s", id)
		assert.Equal(t, evt, d.EventID)
		assert.Equal(t, -1, d.index, "B's copy of %s is scheduled", id)
	}
	// The key published on B is known to A.
	require.NoError(t, a.locked(ctx, func() {
		again, ok := a.publish(whStoreA, eventOrderStatus, []byte(`{"id":"o1","status":"pending"}`), "key-1")
		require.True(t, ok)
		assert.Equal(t, evt, again, "publishing key-1 again on A")
	}))

	// A pending delivery, its attempt under way on A, when A gives the
	// lease up: cancelled, it stays pending, and B, leading, sends it.
	var dlv string
	change(t, b, func() {
		d := b.retryLocked(b.byStore[whStoreA][0], b.events[evt])
		dlv = d.ID
	})
	require.NoError(t, a.catchUp(ctx))
	a.mu.Lock()
	a.advanceLocked(clock.now())
	j := a.takeLocked(clock.now())
	require.NotNil(t, j, "A's job")
	a.mu.Unlock()
	a.release(ctx)
	a.mu.Lock()
	a.finishLocked(j, egress.Result{Err: context.Canceled})
	assert.Empty(t, a.deliv[dlv].Attempts, "the cancelled attempt is recorded")
	a.mu.Unlock()

	b.lead(ctx, clock.now())
	require.True(t, b.leading, "B leads once A gave the lease up")
	a.lead(ctx, clock.now())
	require.False(t, a.leading, "A leads again")
	b.mu.Lock()
	whAttemptDue(b, 200)
	assert.Equal(t, statusSucceeded, b.deliv[dlv].Status)
	b.mu.Unlock()

	// B dies: its lease runs out, and A takes it.
	clock.advance(b.leaseTTL() + time.Second)
	a.lead(ctx, clock.now())
	assert.True(t, a.leading, "A leads once B's lease ran out")
	b.lead(ctx, clock.now()) // B, back, finds its lease taken: it stops sending
	assert.False(t, b.leading, "B leads after its lease was taken")
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
			now := start.Add(time.Duration(i) * feedTrim)
			change(t, a, func() { ids = append(ids, whAddEndpoint(a, whStoreA).ID) })
			require.NoError(t, a.trimFeed(ctx, now))
			if len(ids) == maxEndpointsPerStore {
				change(t, a, func() {
					for _, e := range slices.Clone(a.byStore[whStoreA][:4]) {
						a.removeEndpointLocked(e)
					}
				})
			}
		}
		floor, err := counter(ctx, st, shareFloor)
		require.NoError(t, err)
		require.Positive(t, floor, "the feed's floor")
		left, err := st.ZRange(ctx, shareFeed, math.MinInt64, floor, 0, false)
		require.NoError(t, err)
		assert.Empty(t, left, "entries at or below the floor")

		require.NoError(t, b.catchUp(ctx))
		assert.Contains(t, blog.String(), "reading the shared webhook state again")
		assert.Equal(t, keysOf(a.endpoints), keysOf(b.endpoints), "B's endpoints")
		blog.Reset()
		change(t, a, func() { whAddEndpoint(a, whStoreA) })
		require.NoError(t, b.catchUp(ctx))
		assert.Equal(t, keysOf(a.endpoints), keysOf(b.endpoints), "B's endpoints after one more")
		assert.NotContains(t, blog.String(), "again", "B's log when it was not behind")
	})

	t.Run("store emptied", func(t *testing.T) {
		st, _ := shStore(t)
		a, _ := shReplica(t, st)
		b, blog := shReplica(t, st)
		ctx := t.Context()
		var id string
		change(t, a, func() { id = whAddEndpoint(a, whStoreA).ID })
		require.NoError(t, b.catchUp(ctx))
		require.NotNil(t, b.endpoints[id])
		// What Redis restarted without persistence holds: nothing.
		feed, err := st.ZRange(ctx, shareFeed, math.MinInt64, math.MaxInt64, 0, false)
		require.NoError(t, err)
		ws := []store.Write{{Key: shareGen}, {Key: shareEpoch}, {Key: hookKey(kindEndpoint, id)}, {Key: hookIndex(kindEndpoint), Member: id}}
		for _, m := range feed {
			ws = append(ws, store.Write{Key: shareFeed, Member: m.Member})
		}
		require.NoError(t, st.Apply(ctx, ws))
		change(t, a, func() { whAddEndpoint(a, whStoreB) }) // counter 1: below what B saw
		require.NoError(t, b.catchUp(ctx))
		assert.Contains(t, blog.String(), "reading the shared webhook state again")
		assert.Nil(t, b.endpoints[id], "B's copy of an endpoint the store lost")
		assert.Len(t, b.byStore[whStoreB], 1, "B's endpoints of store B")
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
	var eps []*hooks
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
				err := hk.locked(t.Context(), func() {
					hk.mu.Lock()
					e := hk.endpoints[id]
					k, _ := strconv.Atoi(e.Description)
					e.Description = strconv.Itoa(k + 1)
					hk.touchLocked(kindEndpoint, id)
					hk.mu.Unlock()
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
		require.NoError(t, hk.catchUp(t.Context()))
		assert.Equal(t, strconv.Itoa(n*len(eps)), hk.endpoints[id].Description, "the count on replica %d", i)
	}
}
