package webhook

import (
	"context"
	"encoding/json"
	"errors"
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
		old(kindEndpoint, e.ID, e)
		made = append(made, e.ID)
	}
	var events []string
	for i := range 2 {
		ev := newEvent(EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), now)
		old(kindEvent, ev.ID, ev)
		events = append(events, ev.ID)
		for _, ep := range made {
			id := NewID("dlv_")
			old(kindDelivery, id, &Delivery{ID: id, Seq: uint64(i), EndpointID: ep, EventID: ev.ID, Status: StatusPending, CreatedAt: now.Unix(), NextAt: now.UnixNano()})
		}
	}
	old(kindIdem, testStore+"\x00k1", idemRecord{EventID: events[1], Expires: now.Add(time.Hour).Unix()})
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

// TestUpgradeRecordsInBatches: an upgrade of more than one batch of
// writes makes them all, renewing its hold between batches, and lets the
// hold go at its end.
func TestUpgradeRecordsInBatches(t *testing.T) {
	st := openQueue(t).st
	ctx := context.Background()
	now := time.Now()
	e := newTestEndpoint()
	eb, _ := json.Marshal(e)
	ev := newEvent(EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), now)
	evb, _ := json.Marshal(ev)
	ws := []store.Write{
		{Key: hookKey(kindEndpoint, e.ID), Val: eb}, {Key: hookIndex(kindEndpoint), Member: e.ID, Val: []byte{1}},
		{Key: hookKey(kindEvent, ev.ID), Val: evb}, {Key: hookIndex(kindEvent), Member: ev.ID, Val: []byte{1}},
	}
	const n = 400 // four writes each: past a batch of a thousand
	for i := range n {
		id := NewID("dlv_")
		b, _ := json.Marshal(&Delivery{ID: id, Seq: uint64(i), EndpointID: e.ID, EventID: ev.ID, Status: StatusPending, CreatedAt: now.Unix(), NextAt: now.UnixNano()})
		ws = append(ws, store.Write{Key: hookKey(kindDelivery, id), Val: b}, store.Write{Key: hookIndex(kindDelivery), Member: id, Val: []byte{1}})
	}
	if err := st.Apply(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if ok, err := upgradeRecords(ctx, st, startHooks(t, 1).Cfg); err != nil || !ok {
		t.Fatalf("upgradeRecords = %v, %v; want true", ok, err)
	}
	for _, set := range []string{logKey + e.ID, queueDue + e.ID} {
		if got := len(members(t, st, set)); got != n {
			t.Errorf("%s after the upgrade: %d; want %d", set, got, n)
		}
	}
	if _, err := st.Get(ctx, upgradingKey); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the upgrade's hold after it: %v; want none", err)
	}
}
