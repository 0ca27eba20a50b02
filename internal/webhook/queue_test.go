package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
)

// openQueue is a queue on an embedded store of the test's own, with a
// lease of 15 s.
func openQueue(t *testing.T) *queue {
	t.Helper()
	db, err := embedded.Open(t.TempDir(), embedded.Options{Durability: embedded.Interval, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &queue{st: db, lease: 15 * time.Second}
}

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// enqueue gives ep its places and n deliveries, named ep/0… ep/n-1, due
// at t0.
func enqueue(t *testing.T, q *queue, ep string, n int) {
	t.Helper()
	ws := placesWrites(ep)
	for i := range n {
		ws = append(ws, enqueueWrites(ep, fmt.Sprint(ep, "/", i), t0)...)
	}
	if err := q.st.Apply(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
}

// claimedIDs is the deliveries of cs, sorted.
func claimedIDs(cs []claim) []string {
	var ds []string
	for _, c := range cs {
		ds = append(ds, c.Delivery)
	}
	slices.Sort(ds)
	return ds
}

func mustClaim(t *testing.T, q *queue, now time.Time, n int) []claim {
	t.Helper()
	cs, err := q.claim(context.Background(), now, n)
	if err != nil {
		t.Fatalf("claim(%v, %d): %v", now, n, err)
	}
	return cs
}

// TestQueuePlaces: a claim takes at most PerEndpointInFlight deliveries
// of an endpoint, across the queues of replicas on one store; the holder
// of a place takes the endpoint's next delivery as it ends one.
func TestQueuePlaces(t *testing.T) {
	a := openQueue(t)
	b := &queue{st: a.st, lease: a.lease} // another replica's
	enqueue(t, a, "we_slow", 6)
	enqueue(t, a, "we_other", 1)

	cs := mustClaim(t, a, t0, 10)
	want := []string{"we_other/0", "we_slow/0", "we_slow/1", "we_slow/2", "we_slow/3"}
	if got := claimedIDs(cs); !slices.Equal(got, want) {
		t.Fatalf("claim(10) = %q; want %q", got, want)
	}
	if got := mustClaim(t, b, t0.Add(2*readyHold), 10); len(got) != 0 {
		t.Errorf("another replica's claim with every place taken = %q; want none", claimedIDs(got))
	}
	i := slices.IndexFunc(cs, func(c claim) bool { return c.Delivery == "we_slow/0" })
	first := cs[i]
	if err := a.setDue(context.Background(), first, time.Time{}); err != nil {
		t.Fatal(err)
	}
	next, ok, err := a.handOff(context.Background(), first, t0.Add(time.Second), time.Time{})
	if err != nil || !ok || next.slot != first.slot || next.Delivery != "we_slow/4" {
		t.Errorf("handOff after we_slow/0 = %+v, %v, %v; want we_slow/4 in place %q", next, ok, err, first.slot)
	}
}

// TestQueueClaimSpreads: a claim spreads its workers over the endpoints
// with something due, as evenly as it can, rather than filling the first
// endpoints' places.
func TestQueueClaimSpreads(t *testing.T) {
	for _, tt := range []struct {
		eps  int // endpoints with 4 due each
		n    int
		want []int // deliveries claimed of each endpoint
	}{
		{eps: 4, n: 4, want: []int{1, 1, 1, 1}},
		{eps: 4, n: 6, want: []int{2, 2, 2, 0}},
		{eps: 2, n: 3, want: []int{2, 1}},
		{eps: 2, n: 8, want: []int{4, 4}},
		{eps: 2, n: 10, want: []int{4, 4}},
		{eps: 3, n: 2, want: []int{1, 1, 0}},
	} {
		t.Run(fmt.Sprint(tt.eps, " endpoints, ", tt.n, " workers"), func(t *testing.T) {
			q := openQueue(t)
			for i := range tt.eps {
				enqueue(t, q, fmt.Sprint("we_", i), 4)
			}
			got := make([]int, tt.eps)
			for _, c := range mustClaim(t, q, t0, tt.n) {
				var i int
				fmt.Sscanf(c.Endpoint, "we_%d", &i)
				got[i]++
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("claim(%d) over %d endpoints took %v of each; want %v", tt.n, tt.eps, got, tt.want)
			}
		})
	}
}

// TestQueueHandOff: the holder of a place hands it to the endpoint's next
// delivery under the lease its outcome's writes renewed, or under a new
// one; but once its own lease has run out, the place is left alone, as
// another may hold it by then.
func TestQueueHandOff(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		at        time.Duration // after t0, when handOff is called
		renewed   bool          // the outcome's writes renewed the place
		wantOK    bool
		wantUntil time.Duration // after t0
		wantSlot  time.Duration // after t0: the place's score then
	}{
		// openQueue's lease is 15 s.
		{name: "renewed", at: time.Second, renewed: true, wantOK: true, wantUntil: 17 * time.Second, wantSlot: 17 * time.Second},
		{name: "not renewed", at: time.Second, wantOK: true, wantUntil: 16 * time.Second, wantSlot: 16 * time.Second},
		{name: "lease lost", at: time.Minute, wantSlot: 15 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := openQueue(t)
			enqueue(t, q, "we_a", 2)
			c := mustClaim(t, q, t0, 1)[0]
			if err := q.setDue(ctx, c, time.Time{}); err != nil {
				t.Fatal(err)
			}
			var held time.Time
			if tt.renewed {
				held = t0.Add(2*time.Second + q.lease)
				if err := q.st.Apply(ctx, []store.Write{renewWrite(c, held)}); err != nil {
					t.Fatal(err)
				}
			}
			next, ok, err := q.handOff(ctx, c, t0.Add(tt.at), held)
			if err != nil || ok != tt.wantOK || ok && !next.until.Equal(t0.Add(tt.wantUntil)) {
				t.Errorf("handOff(%v) = %+v, %v, %v; want ok %v until t0+%v", tt.at, next, ok, err, tt.wantOK, tt.wantUntil)
			}
			slots, err := q.st.ZRange(ctx, queueSlots+"we_a", math.MinInt64, math.MaxInt64, 0, false)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(slots, func(s store.Scored) bool { return s.Member == c.slot })
			want := t0.Add(tt.wantSlot).UnixMilli()
			if i < 0 || slots[i].Score != want {
				t.Errorf("place %q after handOff = %v; want score %d", c.slot, slots, want)
			}
		})
	}
}

// TestQueueLease: a delivery claimed is no one else's until its lease
// ends; then another claims it, its place freed with it.
func TestQueueLease(t *testing.T) {
	a := openQueue(t)
	b := &queue{st: a.st, lease: a.lease}
	enqueue(t, a, "we_a", 1)
	if got := claimedIDs(mustClaim(t, a, t0, 1)); !slices.Equal(got, []string{"we_a/0"}) {
		t.Fatalf("claim = %q; want we_a/0", got)
	}
	for _, tt := range []struct {
		at   time.Duration
		want []string
	}{
		{time.Second, nil},
		{a.lease - time.Millisecond, nil},
		{a.lease, []string{"we_a/0"}},
	} {
		if got := claimedIDs(mustClaim(t, b, t0.Add(tt.at), 1)); !slices.Equal(got, tt.want) {
			t.Errorf("claim at t0+%v by another = %q; want %q", tt.at, got, tt.want)
		}
	}
}

// TestQueueSlowEndpoint: an endpoint whose places are all held, with a
// backlog, never stands before another endpoint's delivery, however
// small the claim.
func TestQueueSlowEndpoint(t *testing.T) {
	q := openQueue(t)
	enqueue(t, q, "we_slow", 100)
	if got := mustClaim(t, q, t0, PerEndpointInFlight); len(got) != PerEndpointInFlight {
		t.Fatalf("claim = %q; want %d of we_slow", claimedIDs(got), PerEndpointInFlight)
	}
	enqueue(t, q, "we_fast", 1)
	for _, at := range []time.Duration{0, 2 * readyHold, 10 * readyHold} {
		if err := q.st.ZAdd(context.Background(), queueDue+"we_fast", "we_fast/0", t0.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if err := q.refresh(context.Background(), "we_fast"); err != nil {
			t.Fatal(err)
		}
		if got := claimedIDs(mustClaim(t, q, t0.Add(at), 1)); !slices.Equal(got, []string{"we_fast/0"}) {
			t.Errorf("claim(1) at t0+%v = %q; want we_fast/0", at, got)
		}
	}
}

// TestQueueMissingPlaces: an endpoint whose places were never written (a
// crash cut the Apply short) gets them at its first claim, and sends.
func TestQueueMissingPlaces(t *testing.T) {
	q := openQueue(t)
	if err := q.st.Apply(context.Background(), enqueueWrites("we_a", "we_a/0", t0)); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, q, t0, 1) // finds no place, and makes them
	if got := claimedIDs(mustClaim(t, q, t0.Add(2*readyHold), 1)); !slices.Equal(got, []string{"we_a/0"}) {
		t.Errorf("claim after the places were made = %q; want we_a/0", got)
	}
}

// TestQueueReadyEntry: refresh lists an endpoint by its earliest due
// delivery, and not at all once it has none.
func TestQueueReadyEntry(t *testing.T) {
	q := openQueue(t)
	ctx := context.Background()
	enqueue(t, q, "we_a", 1)
	c := mustClaim(t, q, t0, 1)[0]
	if err := q.setDue(ctx, c, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.handOff(ctx, c, t0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := q.next(ctx); err != nil || !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("next() after a retry in a minute = %v, %v, %v; want t0+1m", at, ok, err)
	}
	c = mustClaim(t, q, t0.Add(time.Minute), 1)[0]
	if err := q.setDue(ctx, c, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.handOff(ctx, c, t0.Add(time.Minute), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := q.next(ctx); err != nil || ok {
		t.Errorf("next() with nothing queued = %v, %v, %v; want none", at, ok, err)
	}
}
