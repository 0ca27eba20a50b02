package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
)

// TestUpgradeRecords: the state the working copy wrote (two endpoints,
// two events published to both, one with an Idempotency-Key) reads, once
// upgraded, as the state of record: the store's endpoints in the order
// they were made, each log newest first with the events in the
// deliveries, the pending deliveries queued, the key answering its
// event. A second upgrade finds it done.
func TestUpgradeRecords(t *testing.T) {
	hk := startHooks(t, 1)
	hk.Stop() // the working copy's dispatcher would send: the deliveries stay pending
	hk.St = openQueue(t).st
	ctx := context.Background()
	var made []string
	for range 2 {
		u := "https://hooks.example.com/"
		v, err := hk.CreateEndpoint(ctx, testStore, EndpointChange{URL: &u, Events: []string{EventOrderStatus}})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, v["id"].(string))
	}
	var events []string
	for _, key := range []string{"", "k1"} {
		evt, err := hk.Publish(ctx, testStore, EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), key)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, evt)
	}

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
