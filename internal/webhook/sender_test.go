package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/egress"
	"deeplink/internal/signature"
	"deeplink/internal/store"
)

// senderConfig is webhooks' configuration for the sender's tests: a
// timeout of 2 s and retries 50 ms apart.
func senderConfig() config.WebhookConfig {
	return config.WebhookConfig{Timeout: config.Duration(2 * time.Second),
		RetrySchedule: []config.Duration{config.Duration(50 * time.Millisecond), config.Duration(50 * time.Millisecond)}}
}

// startSender runs a sender of workers workers on st until the test ends,
// its clock skew ahead of the wall clock.
func startSender(t *testing.T, st store.Store, workers int, skew time.Duration) *sender {
	t.Helper()
	client, err := egress.NewClient(egress.Options{Timeout: 2 * time.Second, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(st, senderConfig(), client, workers, func() time.Time { return time.Now().Add(skew) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// putEndpoint writes an enabled endpoint at url, subscribed to orders,
// with its places.
func putEndpoint(t *testing.T, st store.Store, id, url string) {
	t.Helper()
	e := &Endpoint{ID: id, StoreID: testStore, URL: url, Events: []string{EventOrderStatus}, Enabled: true, Secret: signature.NewSecret()}
	b, err := marshalRecord(e)
	if err != nil {
		t.Fatal(err)
	}
	ws := append(placesWrites(id), store.Write{Key: hookKey(kindEndpoint, id), Val: b})
	if err := st.Apply(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
}

// putDelivery writes a pending delivery of an order event to ep, due at
// at, and returns its id.
func putDelivery(t *testing.T, st store.Store, ep string, at time.Time) string {
	t.Helper()
	ev := &Event{ID: NewID("evt_"), Type: EventOrderStatus, CreatedAt: at.Unix()}
	ev.Body = json.RawMessage(fmt.Sprintf(`{"id":%q,"type":"order.status.updated","created_at":%d,"data":{"object":{"id":"o1","status":"pending"}}}`, ev.ID, ev.CreatedAt))
	d := &Delivery{ID: NewID("dlv_"), EndpointID: ep, EventID: ev.ID, Status: StatusPending, CreatedAt: at.Unix(), NextAt: at.UnixNano(), Event: ev}
	b, err := marshalRecord(d)
	if err != nil {
		t.Fatal(err)
	}
	ws := append(enqueueWrites(ep, d.ID, at), store.Write{Key: hookKey(kindDelivery, d.ID), Val: b})
	if err := st.Apply(context.Background(), ws); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

func delivery(t *testing.T, st store.Store, id string) *Delivery {
	t.Helper()
	_, d, err := readRecord[Delivery](context.Background(), st, hookKey(kindDelivery, id))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitFor waits for ch, or fails with what.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
	var zero T
	return zero
}

// TestSenderRetriesUntilSuccess: a delivery answered 500 is retried on
// the schedule, and its record ends succeeded with both attempts, out of
// the queue.
func TestSenderRetriesUntilSuccess(t *testing.T) {
	st := openQueue(t).st
	var n atomic.Int64
	hits := make(chan int, 4)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
		hits <- int(n.Load())
	}))
	t.Cleanup(rc.Close)
	putEndpoint(t, st, "we_a", rc.URL)
	id := putDelivery(t, st, "we_a", time.Now())
	s := startSender(t, st, 4, 0)
	waitFor(t, hits, "the first attempt")
	waitFor(t, hits, "the retry")
	// The outcome is written after the answer has arrived.
	eventually(t, func() bool { return delivery(t, st, id).Status == StatusSucceeded }, "the delivery never succeeded")
	d := delivery(t, st, id)
	if len(d.Attempts) != 2 || d.Attempts[0].Status != 500 || d.Attempts[1].Status != 200 {
		t.Errorf("attempts = %+v; want 500 then 200", d.Attempts)
	}
	// The endpoint leaves the queue's list as the worker, finding nothing
	// more due, hands its place back: just after the outcome.
	eventually(t, func() bool {
		_, listed, err := s.q.next(context.Background())
		return err == nil && !listed
	}, "the queue still lists the endpoint")
}

// TestSenderTakesOverADeadClaim: a delivery claimed by a sender that died
// is sent by another once the lease has run out.
func TestSenderTakesOverADeadClaim(t *testing.T) {
	st := openQueue(t).st
	hits := make(chan string, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits <- r.Header.Get("Webhook-Id") }))
	t.Cleanup(rc.Close)
	putEndpoint(t, st, "we_a", rc.URL)
	id := putDelivery(t, st, "we_a", time.Now())
	dead := &queue{st: st, lease: senderLease(senderConfig())}
	if cs, err := dead.claim(context.Background(), time.Now(), 1); err != nil || len(cs) != 1 {
		t.Fatalf("the dead sender's claim = %v, %v", cs, err)
	}
	startSender(t, st, 4, dead.lease+time.Second) // its clock past the lease
	if got, want := waitFor(t, hits, "the delivery the dead sender claimed was never sent"), delivery(t, st, id).EventID; got != want {
		t.Errorf("sent %s; want %s", got, want)
	}
}

// TestSenderFencing: an attempt whose delivery another sender attempted
// meanwhile (its lease ran out) writes nothing: the other's outcome
// stands. A record ended meanwhile (its endpoint disabled) takes the
// attempt in and stays ended.
func TestSenderFencing(t *testing.T) {
	st := openQueue(t).st
	ctx := context.Background()
	client, _ := egress.NewClient(egress.Options{Timeout: time.Second, AllowPrivate: true})
	s := newSender(st, senderConfig(), client, 1, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	putEndpoint(t, st, "we_a", "http://127.0.0.1:1/")
	for _, tt := range []struct {
		name         string
		change       func(d *Delivery)
		wantStatus   string
		wantAttempts int
	}{
		{"attempted by another", func(d *Delivery) {
			d.Attempts = append(d.Attempts, Attempt{Status: 200})
			d.Status = StatusSucceeded
		}, StatusSucceeded, 1},
		{"failed meanwhile", func(d *Delivery) { d.Status, d.Reason = StatusFailed, ReasonDisabled }, StatusFailed, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id := putDelivery(t, st, "we_a", time.Now())
			c := claim{Endpoint: "we_a", Delivery: id, slot: "0", until: time.Now().Add(time.Minute)}
			raw, d, err := readRecord[Delivery](ctx, st, hookKey(kindDelivery, id))
			if err != nil {
				t.Fatal(err)
			}
			other := *d
			tt.change(&other)
			b, _ := marshalRecord(&other)
			if err := st.Put(ctx, hookKey(kindDelivery, id), b, time.Time{}); err != nil {
				t.Fatal(err)
			}
			a := Attempt{Status: 500, Error: "the receiver answered 500"}
			if _, _, err := s.write(ctx, c, testStore, raw, d, &a, ""); err != nil {
				t.Fatal(err)
			}
			got := delivery(t, st, id)
			if got.Status != tt.wantStatus || len(got.Attempts) != tt.wantAttempts {
				t.Errorf("record after the stale write = %s with %d attempts; want %s with %d", got.Status, len(got.Attempts), tt.wantStatus, tt.wantAttempts)
			}
		})
	}
}

// TestSenderWorkers: a sender of 2 workers makes 2 attempts at once;
// the third delivery waits, due, in its endpoint's queue.
func TestSenderWorkers(t *testing.T) {
	st := openQueue(t).st
	rc, arrived := blockingReceiver(t, 3)
	var third string
	for i := range 3 {
		ep := fmt.Sprint("we_", i)
		putEndpoint(t, st, ep, rc)
		third = putDelivery(t, st, ep, time.Now())
	}
	s := startSender(t, st, 2, 0)
	waitFor(t, arrived, "the first attempt")
	waitFor(t, arrived, "the second attempt")
	if n := len(s.free); n != 0 {
		t.Errorf("idle workers with two attempts under way = %d; want 0", n)
	}
	due := 0
	for i := range 3 {
		ds, err := st.ZRange(context.Background(), queueDue+fmt.Sprint("we_", i), 0, time.Now().UnixMilli(), 0, false)
		if err != nil {
			t.Fatal(err)
		}
		due += len(ds)
	}
	if due != 1 {
		t.Errorf("deliveries due and unclaimed = %d; want 1 (of the three, %s among them)", due, third)
	}
}

// eventually waits for cond, looking every millisecond, or fails with
// what after 10 s.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal(what)
		}
	}
}

// TestSenderEndpointDeletedMidAttempt: an attempt whose endpoint another
// process deleted while it was under way is cut short within a second,
// its delivery dropped, and it is no longer counted under way.
func TestSenderEndpointDeletedMidAttempt(t *testing.T) {
	st := openQueue(t).st
	rc, arrived := blockingReceiver(t, 1)
	putEndpoint(t, st, "we_a", rc)
	id := putDelivery(t, st, "we_a", time.Now())
	s := startSender(t, st, 1, 0)
	waitFor(t, arrived, "the attempt")
	if err := st.Delete(context.Background(), hookKey(kindEndpoint, "we_a")); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		_, err := st.Get(context.Background(), hookKey(kindDelivery, id))
		return errors.Is(err, store.ErrNotFound) && !s.busy("we_a", id)
	}, "the delivery of the deleted endpoint never dropped, or its attempt still counted under way")
}

// TestSenderSuccessClosesAWindowOpenedMeanwhile: a success closes the
// endpoint's failure window even when a failure of another attempt
// opened it while this one was under way.
func TestSenderSuccessClosesAWindowOpenedMeanwhile(t *testing.T) {
	st := openQueue(t).st
	r := &records{st: st, now: time.Now}
	answered := make(chan struct{}, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Another attempt's failure, while this one is under way.
		if _, err := r.changeEndpoint(context.Background(), testStore, "we_a", func(e *Endpoint) error {
			e.FailingSince = time.Now().UnixNano()
			return nil
		}); err != nil {
			t.Error(err)
		}
		answered <- struct{}{}
	}))
	t.Cleanup(rc.Close)
	putEndpoint(t, st, "we_a", rc.URL)
	id := putDelivery(t, st, "we_a", time.Now())
	startSender(t, st, 1, 0)
	waitFor(t, answered, "the attempt")
	eventually(t, func() bool { return delivery(t, st, id).Status == StatusSucceeded }, "the delivery never succeeded")
	if _, e, err := r.endpoint(context.Background(), testStore, "we_a"); err != nil || e.FailingSince != 0 {
		t.Errorf("failing since %v, %v after the success; want the window closed", e.FailingSince, err)
	}
}
