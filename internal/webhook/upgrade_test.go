package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"deeplink/internal/store"
)

// TestUpgradeRecords: the state the working copy wrote (two endpoints,
// two events published to both, one with an Idempotency-Key) reads, once
// upgraded, as the state of record: the store's endpoints in the order
// they were made, each log newest first with the events in the
// deliveries, the pending deliveries queued, the key answering its
// event. A second upgrade finds it done.
func TestUpgradeRecords(t *testing.T) {
	st := openQueue(t).st
	ctx := context.Background()
	now := time.Now()
	var ws []store.Write
	old := func(kind, id string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, store.Write{Key: hookKey(kind, id), Val: b}, store.Write{Key: hookIndex(kind), Member: id, Val: []byte{1}})
	}
	// As the working copy wrote them: endpoints with their next sequence
	// number, events in records of their own, deliveries without theirs.
	var made []string
	for i := range 2 {
		e := newTestEndpoint()
		e.StoreID = strings.ToUpper(testStore) // spelt otherwise than the configuration
		e.CreatedAt, e.CreatedNS, e.NextSeq = now.Unix(), now.UnixNano()+int64(i), 2
		old(KindEndpoint, e.ID, e)
		made = append(made, e.ID)
	}
	var events []string
	for i := range 2 {
		ev := newEvent(EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), now)
		old(KindEvent, ev.ID, ev)
		events = append(events, ev.ID)
		for _, ep := range made {
			id := NewID("dlv_")
			old(kindDelivery, id, &Delivery{ID: id, Seq: uint64(i), EndpointID: ep, EventID: ev.ID, Status: StatusPending, CreatedAt: now.Unix(), NextAt: now.UnixNano()})
		}
	}
	old(kindIdem, testStore+"\x00k1", idem{EventID: events[1], Expires: now.Add(time.Hour).Unix()})
	if err := st.Apply(ctx, ws); err != nil {
		t.Fatal(err)
	}
	hk := startHooks(t, 1)
	hk.Stop() // the deliveries stay pending, for the test to see
	hk.St = st

	for i, want := range []bool{true, false} {
		if got, err := upgradeRecords(ctx, hk.St, hk.Cfg); err != nil || got != want {
			t.Fatalf("upgradeRecords #%d = %v, %v; want %v", i+1, got, err, want)
		}
	}
	r := &records{st: hk.St, now: hk.Now}
	eps, err := r.storeEndpoints(ctx, testStore)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range eps {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, made) {
		t.Fatalf("endpoints after the upgrade = %q; want %q", got, made)
	}
	for _, e := range eps {
		page, _, err := r.logPage(ctx, e, DeliveryQuery{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var evs []string
		for _, d := range page {
			if d.Event == nil || d.Event.ID != d.EventID {
				t.Errorf("delivery %s has event %v; want %s", d.ID, d.Event, d.EventID)
				continue
			}
			evs = append(evs, d.Event.ID)
		}
		if want := []string{events[1], events[0]}; !slices.Equal(evs, want) {
			t.Errorf("log of %s = %q; want %q (newest first)", e.ID, evs, want)
		}
		if n := len(members(t, hk.St, queueDue+e.ID)); n != 2 {
			t.Errorf("queued for %s = %d; want 2", e.ID, n)
		}
	}
	if evt, err := r.publish(ctx, testStore, EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), "k1"); err != nil || evt != events[1] {
		t.Errorf("publishing k1 again = %q, %v; want %q", evt, err, events[1])
	}
}
