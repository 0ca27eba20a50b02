package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"deeplink/internal/config"
)

const testStore = "7c9e6679-7425-40de-944b-e07fc1f90ae7"

// startHooks is a running engine of one store, keeping nothing, with
// webhooks.workers set to workers.
func startHooks(t *testing.T, workers int) *Hooks {
	t.Helper()
	b, _ := json.Marshal(map[string]any{
		"webhooks": map[string]any{"allow_insecure_urls": true, "workers": workers},
		"stores":   []map[string]any{{"id": testStore, "api_keys": []string{"ak_test"}, "redirect_domains": []string{"shop.example.com"}}},
	})
	cfg, err := config.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	hk := NewHooks(cfg)
	hk.St = openQueue(t).st
	if err := hk.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := hk.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hk.Stop)
	return hk
}

// TestWorkersBoundAttempts: with webhooks.workers at 2, three endpoints
// each under their in-flight limit get two attempts under way at once,
// and the third waits, queued, for a worker.
func TestWorkersBoundAttempts(t *testing.T) {
	hk := startHooks(t, 2)
	if got := hk.Workers(); got != 2 {
		t.Fatalf("Workers() = %d; want 2", got)
	}
	rc, arrived := blockingReceiver(t, 3)
	for range 3 {
		u := rc
		if _, err := hk.CreateEndpoint(t.Context(), testStore, EndpointChange{URL: &u, Events: []string{EventOrderStatus}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hk.Publish(t.Context(), testStore, EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), ""); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("two attempts did not start")
		}
	}
	// Both workers are held by the receiver now: the third delivery
	// stays queued, due.
	if n := len(hk.send.free); n != 0 {
		t.Errorf("idle workers with two attempts under way = %d; want 0", n)
	}
	if n, err := hk.QueueDepth(context.Background()); err != nil || n != 3 {
		t.Errorf("QueueDepth() = %d, %v; want 3 (2 under way, 1 waiting)", n, err)
	}
}

// blockingReceiver is a receiver that holds every request until the test
// ends; arrived has a value for each of the first n requests.
func blockingReceiver(t *testing.T, n int) (url string, arrived <-chan struct{}) {
	t.Helper()
	ch, release := make(chan struct{}, n), make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case ch <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(rc.Close)
	t.Cleanup(func() { close(release) })
	return rc.URL, ch
}
