package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"deeplink/internal/signature"
	"deeplink/internal/store"
)

// openRecords is the records of an embedded store of the test's own,
// with a clock the test sets.
func openRecords(t *testing.T) (*records, *time.Time) {
	t.Helper()
	now := time.Now()
	return &records{st: openQueue(t).st, now: func() time.Time { return now }}, &now
}

// newTestEndpoint is an enabled endpoint of testStore, subscribed to
// orders.
func newTestEndpoint() *Endpoint {
	return &Endpoint{ID: NewID("we_"), StoreID: testStore, URL: "https://hooks.example.com/", Events: []string{EventOrderStatus}, Enabled: true, Secret: signature.NewSecret()}
}

// TestEndpointCapRace: six creations racing, on two replicas' records,
// for the store's last place give one endpoint; the five are listed.
func TestEndpointCapRace(t *testing.T) {
	r, _ := openRecords(t)
	capRace(t, r.st)
}

// capRace is TestEndpointCapRace on st, a store of the test's own.
func capRace(t *testing.T, st store.Store) {
	a := &records{st: st, now: time.Now}
	b := &records{st: st, now: time.Now}
	ctx := context.Background()
	for range MaxEndpointsPerStore - 1 {
		if err := a.createEndpoint(ctx, newTestEndpoint()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		r := []*records{a, b}[i%2]
		wg.Go(func() { errs[i] = r.createEndpoint(ctx, newTestEndpoint()) })
	}
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case !errors.Is(err, ErrEndpointCap):
			t.Errorf("createEndpoint: %v; want nil or ErrEndpointCap", err)
		}
	}
	if made != 1 {
		t.Errorf("creations for the last place that succeeded = %d; want 1", made)
	}
	if eps, err := a.storeEndpoints(ctx, testStore); err != nil || len(eps) != MaxEndpointsPerStore {
		t.Errorf("storeEndpoints = %d endpoints, %v; want %d", len(eps), err, MaxEndpointsPerStore)
	}
}

// TestChangeEndpointRace: changes racing on one endpoint are all made,
// each on what the one before it wrote.
func TestChangeEndpointRace(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := r.changeEndpoint(ctx, testStore, e.ID, func(e *Endpoint) error {
				e.Description += fmt.Sprint(i)
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	_, got, err := r.endpoint(ctx, testStore, e.ID)
	if err != nil || len(got.Description) != 8 {
		t.Errorf("description after 8 changes = %q, %v; want 8 digits", got.Description, err)
	}
	if _, _, err := r.endpoint(ctx, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", e.ID); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("the endpoint read as another store's: %v; want ErrNoEndpoint", err)
	}
}

// members is the members of set.
func members(t *testing.T, st store.Store, set string) []string {
	t.Helper()
	ms, err := st.ZRange(context.Background(), set, math.MinInt64, math.MaxInt64, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Member)
	}
	return out
}

// TestPublish: a publish makes a delivery, logged and queued, for each
// enabled endpoint subscribed to its type; the same Idempotency-Key
// within a day answers the first event and makes nothing.
func TestPublish(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	on, off, other := newTestEndpoint(), newTestEndpoint(), newTestEndpoint()
	off.Enabled = false
	other.Events = []string{EventTest}
	for _, e := range []*Endpoint{on, off, other} {
		if err := r.createEndpoint(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	obj := json.RawMessage(`{"id":"o1","status":"pending"}`)
	first, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1")
	if err != nil || again != first {
		t.Errorf("publish again with k1 = %q, %v; want %q", again, err, first)
	}
	for _, tt := range []struct {
		e    *Endpoint
		want int
	}{{on, 1}, {off, 0}, {other, 0}} {
		if got := len(members(t, r.st, logKey+tt.e.ID)); got != tt.want {
			t.Errorf("deliveries logged on %s = %d; want %d", tt.e.ID, got, tt.want)
		}
		if got := len(members(t, r.st, queueDue+tt.e.ID)); got != tt.want {
			t.Errorf("deliveries queued for %s = %d; want %d", tt.e.ID, got, tt.want)
		}
	}
	d := delivery(t, r.st, members(t, r.st, logKey+on.ID)[0])
	if d.EventID != first || d.Event == nil || d.Status != StatusPending {
		t.Errorf("the delivery = %+v; want pending, of %s, with its event", d, first)
	}
}

// TestPublishCutShort: a replay of a publish whose deliveries were never
// written waits while it may still be under way, and after
// publishDeadline makes them, once.
func TestPublishCutShort(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	ev, _ := cutShort(t, r, e.ID, *now, 0) // a publish that died after its Insert
	obj := json.RawMessage(`{"id":"o1","status":"pending"}`)
	if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1"); !errors.Is(err, errPublishUnderWay) {
		t.Errorf("replay at once = %v; want errPublishUnderWay", err)
	}
	*now = now.Add(publishDeadline)
	for range 2 {
		got, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1")
		if err != nil || got != ev.ID {
			t.Fatalf("replay after the deadline = %q, %v; want %q", got, err, ev.ID)
		}
	}
	if got := len(members(t, r.st, logKey+e.ID)); got != 1 {
		t.Errorf("deliveries logged after two replays = %d; want 1", got)
	}
}

// TestDeleteEndpoint: deleting an endpoint takes its record, its place
// in the store's list, its log, deliveries and queue with it.
func TestDeleteEndpoint(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	e, kept := newTestEndpoint(), newTestEndpoint()
	for _, e := range []*Endpoint{e, kept} {
		if err := r.createEndpoint(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.publish(ctx, testStore, EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), ""); err != nil {
		t.Fatal(err)
	}
	dlv := members(t, r.st, logKey+e.ID)[0]
	if _, err := r.deleteEndpoint(ctx, testStore, e.ID); err != nil {
		t.Fatal(err)
	}
	if eps, _ := r.storeEndpoints(ctx, testStore); len(eps) != 1 || eps[0].ID != kept.ID {
		t.Errorf("endpoints after the delete = %v; want only %s", eps, kept.ID)
	}
	for _, set := range []string{logKey + e.ID, queueDue + e.ID, queueSlots + e.ID} {
		if ms := members(t, r.st, set); len(ms) != 0 {
			t.Errorf("%s after the delete = %q; want empty", set, ms)
		}
	}
	if _, err := r.st.Get(ctx, hookKey(kindDelivery, dlv)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the deleted endpoint's delivery: %v; want ErrNotFound", err)
	}
	if _, err := r.deleteEndpoint(ctx, testStore, e.ID); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("deleting it again: %v; want ErrNoEndpoint", err)
	}
}

// TestFailQueued: disabling an endpoint fails what is queued for it at
// once; dropping a type fails only what it no longer takes, and an
// explicit delivery (the test call) still goes.
func TestFailQueued(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	e.Events = []string{EventOrderStatus, EventTest}
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	order := putDelivery(t, r.st, e.ID, *now)
	test := newDelivery(testStore, e.ID, newEvent(EventTest, json.RawMessage(`{"id":"test"}`), *now), *now)
	test.Explicit = true
	if err := r.st.Apply(ctx, enqueueRecord(test, *now)); err != nil {
		t.Fatal(err)
	}

	e.Events = []string{EventTest}
	if n, err := r.failQueued(ctx, e, func(d *Delivery) bool { return e.refusal(d) != "" }); err != nil || len(n) != 1 {
		t.Fatalf("failQueued(refused) = %d, %v; want 1", len(n), err)
	}
	if d := delivery(t, r.st, order); d.Status != StatusFailed || d.Reason != ReasonUnsubscribed {
		t.Errorf("the order delivery = %s (%q); want failed, %q", d.Status, d.Reason, ReasonUnsubscribed)
	}
	if d := delivery(t, r.st, test.ID); d.Status != StatusPending {
		t.Errorf("the test call's delivery = %s; want pending", d.Status)
	}
	e.Enabled = false
	if n, err := r.failQueued(ctx, e, func(*Delivery) bool { return true }); err != nil || len(n) != 1 {
		t.Fatalf("failQueued(all) = %d, %v; want 1", len(n), err)
	}
	if d := delivery(t, r.st, test.ID); d.Status != StatusFailed || d.Reason != ReasonDisabled {
		t.Errorf("the test call's delivery once disabled = %s (%q); want failed, %q", d.Status, d.Reason, ReasonDisabled)
	}
	if ms := members(t, r.st, queueDue+e.ID); len(ms) != 0 {
		t.Errorf("queued after both = %q; want none", ms)
	}
	if ms := members(t, r.st, queueReady); len(ms) != 0 {
		t.Errorf("endpoints listed as due = %q; want none", ms)
	}
}

// TestFailureWindow: an endpoint whose attempts all fail for
// disable_after is disabled, reason failing, and what is queued for it
// fails; a success before that closes the window.
func TestFailureWindow(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	const after = time.Hour
	e := newTestEndpoint()
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	queued := putDelivery(t, r.st, e.ID, *now)
	start := *now
	for _, step := range []struct {
		at           time.Duration
		ok           bool
		wantSince    time.Duration // -1: closed
		wantDisabled bool
	}{
		{0, false, 0, false},
		{time.Minute, true, -1, false},
		{2 * time.Minute, false, 2 * time.Minute, false},
		{after, false, 2 * time.Minute, false},
		{after + 2*time.Minute, false, 2 * time.Minute, true},
	} {
		got, disabled, err := r.moveWindowOf(ctx, e, step.ok, start.Add(step.at), after)
		if err == nil && disabled { // as Tick does
			_, err = r.failQueued(ctx, got, func(*Delivery) bool { return true })
		}
		if err != nil {
			t.Fatal(err)
		}
		e = got
		wantSince := int64(0)
		if step.wantSince >= 0 {
			wantSince = start.Add(step.wantSince).UnixNano()
		}
		if e.FailingSince != wantSince || disabled != step.wantDisabled || e.Enabled == step.wantDisabled {
			t.Errorf("moveWindowOf(ok %v) at +%v: failing since %d, disabled %v, enabled %v; want %d, %v", step.ok, step.at, e.FailingSince, disabled, e.Enabled, wantSince, step.wantDisabled)
		}
	}
	if e.DisabledReason != DisabledFailing {
		t.Errorf("disabled_reason = %q; want %q", e.DisabledReason, DisabledFailing)
	}
	if d := delivery(t, r.st, queued); d.Status != StatusFailed {
		t.Errorf("the queued delivery of the disabled endpoint = %s; want failed", d.Status)
	}
}

// TestPublishBudgets: a store's pending deliveries may hold up to its
// budget, and it may make up to its budget of Idempotency-Keys; past
// either a publish makes nothing (ErrOverBudget), but a key it has seen
// is still answered. A delivery that ends gives its room back.
func TestPublishBudgets(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	obj := json.RawMessage(`{"id":"o1","status":"pending"}`)
	size := len(newEvent(EventOrderStatus, obj, r.now()).Body)
	r.budget = &budgets{Pending: 3 * NewCost(size), Idem: 2, Log: 1 << 20}
	if err := r.createEndpoint(ctx, newTestEndpoint()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, nil, nil, ErrOverBudget} {
		if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, ""); !errors.Is(err, want) && err != want {
			t.Fatalf("publish #%d: %v; want %v", i+1, err, want)
		}
	}
	if held, err := r.counter(ctx, pendingKey+testStore); err != nil || held != 3*NewCost(size) {
		t.Errorf("pending = %d, %v; want %d", held, err, 3*NewCost(size))
	}
	if err := r.release(ctx, testStore, 3, 3*size); err != nil { // the three ended
		t.Fatal(err)
	}
	first, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k3"); !errors.Is(err, ErrOverBudget) {
		t.Errorf("a third key: %v; want ErrOverBudget", err)
	}
	if again, err := r.publish(ctx, testStore, EventOrderStatus, obj, "k1"); err != nil || again != first {
		t.Errorf("k1 again past the budget = %q, %v; want %q", again, err, first)
	}
}

// TestTrim: the log keeps its newest size entries, and finished ones up
// to its budget of bytes, dropping the oldest finished first; pending
// ones stay whatever their age, and take no newer one's place.
func TestTrim(t *testing.T) {
	statuses := []string{StatusPending, StatusSucceeded, StatusFailed, StatusPending, StatusSucceeded, StatusSucceeded} // oldest first
	for _, tt := range []struct {
		name   string
		size   int
		budget int64 // in deliveries' logCost
		want   []int // indexes into statuses kept
	}{
		{"all fit", 6, 10, []int{0, 1, 2, 3, 4, 5}},
		{"size 4", 4, 10, []int{0, 2, 3, 4, 5}},
		{"size 1: pending ones stay", 1, 10, []int{0, 3, 5}},
		{"budget of 1 finished", 6, 1, []int{0, 3, 5}},
		{"size 4 and a budget of 1", 4, 1, []int{0, 3, 5}},
		{"size 0: the finished go", 0, 10, []int{0, 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, now := openRecords(t)
			ctx := context.Background()
			var made []string
			for i, st := range statuses {
				at := now.Add(time.Duration(i) * time.Second)
				made = append(made, logged(t, r.st, "we_a", EventOrderStatus, st, at, at.UnixMicro()))
				if st != StatusPending {
					if err := r.st.Apply(ctx, endedWrites("s", delivery(t, r.st, made[i]))); err != nil {
						t.Fatal(err)
					}
				}
			}
			raw, err := r.st.Get(ctx, hookKey(kindDelivery, made[1]))
			if err != nil {
				t.Fatal(err)
			}
			cost := logCost(len(raw))
			if _, err := r.trim(ctx, "we_a", tt.size, tt.budget*cost); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, i := range tt.want {
				want = append(want, made[i])
			}
			var got []string
			r.walkLog(ctx, "we_a", false, math.MinInt64, "", func(_ int64, d *Delivery) bool { got = append(got, d.ID); return true })
			if !slices.Equal(got, want) {
				t.Errorf("log after trim(%d, %d deliveries' bytes) = %q; want %q", tt.size, tt.budget, got, want)
			}
		})
	}
}

// TestPublishCutShortAfterItsRecords: a replay of a publish whose Apply
// kept its deliveries' records and not their queue entries (a prefix of
// it) queues them again.
func TestPublishCutShortAfterItsRecords(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	ev, d := cutShort(t, r, e.ID, *now, 1) // its Apply's first write alone: the record
	*now = now.Add(publishDeadline)
	if got, err := r.publish(ctx, testStore, EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), "k1"); err != nil || got != ev.ID {
		t.Fatalf("replay = %q, %v; want %q", got, err, ev.ID)
	}
	for _, set := range []string{logKey + e.ID, queueDue + e.ID} {
		if ms := members(t, r.st, set); !slices.Equal(ms, []string{d.ID}) {
			t.Errorf("%s after the replay = %q; want %q", set, ms, d.ID)
		}
	}
	if ms := members(t, r.st, queueReady); !slices.Contains(ms, e.ID) {
		t.Errorf("endpoints due after the replay = %q; want %s among them", ms, e.ID)
	}
}

// cutShort writes what a publish with the key k1 of an order event to
// the endpoint ep left when it died after its Insert, having made the
// first kept writes of its Apply, and returns its event and delivery.
func cutShort(t *testing.T, r *records, ep string, now time.Time, kept int) (*Event, *Delivery) {
	t.Helper()
	ev := newEvent(EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), now)
	d := newDelivery(testStore, ep, ev, now)
	m := idemRecord{Store: testStore, EventID: ev.ID, Expires: now.Add(idempotencyTTL).Unix(), Event: ev, Deliveries: map[string]string{d.ID: ep}, Made: now.UnixNano()}
	b, _ := json.Marshal(m)
	ws := enqueueRecord(d, now)
	key := store.Write{Key: hookKey(kindIdem, testStore+"\x00k1"), Val: b, Exp: time.Unix(m.Expires, 0)}
	if err := r.st.Apply(context.Background(), append([]store.Write{key}, ws[:kept]...)); err != nil {
		t.Fatal(err)
	}
	return ev, d
}
