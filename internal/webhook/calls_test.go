package webhook

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/store"
)

// calls is a store that counts the calls made to it: on a store of its
// own (Redis), each is a round trip, and under appendfsync always a
// change's waits for Redis's fsync.
type calls struct {
	store.Store
	n atomic.Int64
}

func (c *calls) Get(ctx context.Context, key string) ([]byte, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *calls) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	c.n.Add(1)
	return c.Store.GetMany(ctx, keys)
}

func (c *calls) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	c.n.Add(1)
	return c.Store.Put(ctx, key, val, exp)
}

func (c *calls) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	c.n.Add(1)
	return c.Store.Insert(ctx, key, val, exp)
}

func (c *calls) Swap(ctx context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	c.n.Add(1)
	return c.Store.Swap(ctx, key, val, exp)
}

func (c *calls) Extend(ctx context.Context, key string, exp time.Time) error {
	c.n.Add(1)
	return c.Store.Extend(ctx, key, exp)
}

func (c *calls) Take(ctx context.Context, key string) ([]byte, error) {
	c.n.Add(1)
	return c.Store.Take(ctx, key)
}

func (c *calls) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	c.n.Add(1)
	return c.Store.CompareAndSwap(ctx, key, old, val, exp)
}

func (c *calls) Delete(ctx context.Context, key string) error {
	c.n.Add(1)
	return c.Store.Delete(ctx, key)
}

func (c *calls) Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error) {
	c.n.Add(1)
	return c.Store.Add(ctx, key, delta, exp)
}

func (c *calls) ZAdd(ctx context.Context, set, member string, score int64) error {
	c.n.Add(1)
	return c.Store.ZAdd(ctx, set, member, score)
}

func (c *calls) ZRem(ctx context.Context, set, member string) error {
	c.n.Add(1)
	return c.Store.ZRem(ctx, set, member)
}

func (c *calls) ZRange(ctx context.Context, set string, min, max int64, limit int, rev bool) ([]store.Scored, error) {
	c.n.Add(1)
	return c.Store.ZRange(ctx, set, min, max, limit, rev)
}

func (c *calls) ZClaim(ctx context.Context, set string, due, until int64, limit int) ([]store.Scored, error) {
	c.n.Add(1)
	return c.Store.ZClaim(ctx, set, due, until, limit)
}

func (c *calls) Apply(ctx context.Context, ws []store.Write) error {
	c.n.Add(1)
	return c.Store.Apply(ctx, ws)
}

// TestPublishCalls: a publish to a store of five endpoints makes a few
// store calls, however many endpoints it has: the list, the budgets'
// counters and the endpoints read in one (in two when the list changed
// since this process last read it), the Idempotency-Key's Insert, and
// one Apply.
func TestPublishCalls(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	r.budget = &budgets{Pending: PendingBudget, Idem: idemBudget, Log: logBudget}
	for range MaxEndpointsPerStore - 1 {
		if err := r.createEndpoint(ctx, newTestEndpoint()); err != nil {
			t.Fatal(err)
		}
	}
	c := &calls{Store: r.st}
	r.st = c
	obj := json.RawMessage(`{"id":"o1","status":"pending"}`)
	for _, tt := range []struct {
		name, key string
		change    func() // before the publish
		want      int64
	}{
		{"no key, a list not read before", "", nil, 3},
		{"no key", "", nil, 2},
		{"a new key", "k1", nil, 3},
		{"the key again (replay)", "k1", nil, 3}, // its Insert refused, the key's record read
		{"an endpoint made since", "", func() { r.createEndpoint(ctx, newTestEndpoint()) }, 3},
		{"no key, five endpoints", "", nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.change != nil {
				tt.change()
			}
			c.n.Store(0)
			if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, tt.key); err != nil {
				t.Fatal(err)
			}
			if got := c.n.Load(); got != tt.want {
				t.Errorf("publish(%q) made %d store calls; want %d", tt.key, got, tt.want)
			}
		})
	}
}

// TestPublishListChanged: a publish makes deliveries to the endpoints
// listed when it reads the list, whatever this process read before
// (listMemo): one made or deleted through another replica since counts.
func TestPublishListChanged(t *testing.T) {
	r, _ := openRecords(t)
	other := &records{st: r.st, now: r.now} // another replica on the same store
	ctx := context.Background()
	obj := json.RawMessage(`{"id":"o1","status":"pending"}`)
	a, b := newTestEndpoint(), newTestEndpoint()
	for _, tt := range []struct {
		name   string
		change func() error // through the other replica
		want   []string     // endpoints the publish makes a delivery to
	}{
		{"one endpoint", func() error { return other.createEndpoint(ctx, a) }, []string{a.ID}},
		{"the same list", func() error { return nil }, []string{a.ID}},
		{"one made", func() error { return other.createEndpoint(ctx, b) }, []string{a.ID, b.ID}},
		{"one deleted", func() error { _, err := other.deleteEndpoint(ctx, testStore, a.ID); return err }, []string{b.ID}},
		{"none", func() error { _, err := other.deleteEndpoint(ctx, testStore, b.ID); return err }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.change(); err != nil {
				t.Fatal(err)
			}
			id, err := r.publish(ctx, testStore, EventOrderStatus, obj, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ep := range []*Endpoint{a, b} {
				for _, m := range members(t, r.st, logKey+ep.ID) {
					if delivery(t, r.st, m).EventID == id {
						got = append(got, ep.ID)
					}
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("publish after %s made deliveries to %q; want %q", tt.name, got, tt.want)
			}
		})
	}
}

// TestAttemptCalls: a successful attempt with more due behind it makes
// four store calls: the delivery and its endpoint read in one, the
// endpoint read again once answered, one Apply of the outcome (the
// record, fenced, the queue, the end's accounting and the place renewed),
// and the claim of the next delivery.
func TestAttemptCalls(t *testing.T) {
	q := openQueue(t)
	ctx := context.Background()
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(rc.Close)
	putEndpoint(t, q.st, "we_a", rc.URL)
	now := time.Now()
	putDelivery(t, q.st, "we_a", now)
	putDelivery(t, q.st, "we_a", now)
	c := &calls{Store: q.st}
	client, err := egress.NewClient(egress.Options{Timeout: time.Second, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(c, senderConfig(), client, 1, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cs, err := s.q.claim(ctx, now, 1)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim = %+v, %v; want one", cs, err)
	}
	first := cs[0].Delivery
	c.n.Store(0)
	held, err := s.attempt(ctx, cs[0])
	if err != nil || held.IsZero() {
		t.Fatalf("attempt = %v, %v; want the place held", held, err)
	}
	if _, ok, err := s.q.handOff(ctx, cs[0], time.Now(), held); err != nil || !ok {
		t.Fatalf("handOff = %v, %v; want the next delivery", ok, err)
	}
	if got := c.n.Load(); got != 4 {
		t.Errorf("an attempt and its hand-off made %d store calls; want 4", got)
	}
	if d := delivery(t, q.st, first); d.Status != StatusSucceeded {
		t.Errorf("delivery after the attempt = %s; want %s", d.Status, StatusSucceeded)
	}
	done, err := q.st.ZRange(ctx, doneKey+"we_a", math.MinInt64, math.MaxInt64, 0, false)
	if err != nil || len(done) != 1 || done[0].Member != first {
		t.Errorf("finished deliveries of we_a = %v, %v; want %s", done, err, first)
	}
	if held, err := q.st.Get(ctx, logBytesKey+"we_a"); err != nil || string(held) == "0" {
		t.Errorf("bytes we_a's log holds = %s, %v; want the delivery's", held, err)
	}
}
