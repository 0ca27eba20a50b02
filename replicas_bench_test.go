//go:build !wasip1

package main

// Webhooks through replicas on one Redis (bench/README.md):
//
//	go test -run '^$' -bench 'ReplicaWebhooks' -benchtime 2000x .

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/redisstore"
	"deeplink/internal/store/redisstore/redistest"
	"deeplink/internal/webhook"
)

const (
	replicaBenchPublishers = 16
	replicaBenchWorkers    = 8
	replicaBenchAnswer     = 20 * time.Millisecond // the receiver's time to answer
)

// BenchmarkReplicaWebhooks publishes events to two stores of five
// endpoints each, at one receiver that answers 200 after 20 ms, through
// one replica on Redis (appendfsync always) and through two (the 16
// publishers split over both), alternately: A/B/A/B, b.N/8 events a
// round. Each replica makes at most 8 attempts at once (webhooks.workers),
// so one replica sends at most 400 deliveries a second: the wait is the
// receiver's, not the CPU's, and two replicas that share the sending
// could send twice as many. The replicas run in this process, each with
// its own HTTP server, engine and dispatcher; the second starts anew for
// each of its rounds, after an unmeasured round like the first's. It reports, for each side,
// the events accepted per second and the deliveries made per second (from
// the first publish to the last delivery of the round), and two's as a
// ratio of one's: publish-ratio and send-ratio. A third side, the
// yardstick (publishYardstick), publishes alongside in each round, to
// the same Redis, and reports yard-events/s: what the design,
// an event's deliveries and their queue entries in one Apply, can take
// here when nothing else is done.
func BenchmarkReplicaWebhooks(b *testing.B) {
	rd := redistest.New(b, redistest.Persistent...)
	// The receiver counts what arrived, and closes done once it is want.
	var (
		mu      sync.Mutex // guards the fields below
		arrived int64
		want    int64
		done    chan struct{}
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(replicaBenchAnswer) // a merchant's server at work
		mu.Lock()
		defer mu.Unlock()
		if arrived++; done != nil && arrived >= want {
			close(done)
			done = nil
		}
	}))
	b.Cleanup(rc.Close)

	cfg := benchConfig(b, 2)
	cfg.Storage.Backend, cfg.Storage.RedisURL, cfg.Storage.RedisPrefix = "redis", rd.URL(), "bench:"
	cfg.Webhooks.Workers = replicaBenchWorkers
	start := func() (*app, *httptest.Server) {
		a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err != nil {
			b.Fatal(err)
		}
		a.srv.ready.Store(true)
		return a, httptest.NewServer(a.srv.handler())
	}
	first, firstURL := start()
	b.Cleanup(func() { firstURL.Close(); first.Close() })
	for _, st := range cfg.Stores {
		for range webhook.MaxEndpointsPerStore {
			body := `{"url":"` + rc.URL + `/hooks","events":["order.status.updated"]}`
			benchPost(b, firstURL.URL+"/stores/"+st.ID+"/webhooks", st.APIKeys[0], body, http.StatusCreated)
		}
	}

	// publish publishes n events from the publishers, split over urls,
	// and returns how long that took.
	publish := func(urls []string, n int) time.Duration {
		t0 := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for p := range replicaBenchPublishers {
			wg.Go(func() {
				u := urls[p%len(urls)]
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					st := cfg.Stores[i%int64(len(cfg.Stores))]
					body := `{"type":"order.status.updated","data":{"object":` + benchOrder + `}}`
					benchPost(b, u+"/stores/"+st.ID+"/events", st.APIKeys[0], body, http.StatusAccepted)
				}
			})
		}
		wg.Wait()
		return time.Since(t0)
	}
	// round publishes n events through urls and waits for their 5n
	// deliveries; it returns how long the publishing and the whole took.
	round := func(urls []string, n int) (pub, all time.Duration) {
		mu.Lock()
		want = arrived + int64(n*webhook.MaxEndpointsPerStore)
		delivered := make(chan struct{})
		done = delivered
		mu.Unlock()
		t0 := time.Now()
		pub = publish(urls, n)
		select {
		case <-delivered:
		case <-time.After(5 * time.Minute):
			b.Fatalf("the %d deliveries of %d events not all made after 5 minutes", n*webhook.MaxEndpointsPerStore, n)
		}
		return pub, time.Since(t0)
	}

	type side struct {
		name      string
		replicas  int
		events    int
		pub, send time.Duration
	}
	one, two := &side{name: "one", replicas: 1}, &side{name: "two", replicas: 2}
	yard := &side{name: "yard"}
	yardURL := publishYardstick(b, rd.URL())
	publish([]string{yardURL}, 2*replicaBenchPublishers) // first connections, not measured
	run := func(s *side, n int) {
		urls := []string{firstURL.URL}
		if s.replicas == 2 {
			second, secondURL := start()
			defer func() { secondURL.Close(); second.Close() }()
			urls = append(urls, secondURL.URL)
			// The second is new to each of its runs: it gets the unmeasured
			// round the first got, so that its first connections (to Redis,
			// from the publishers) fall outside what is measured for it too.
			round(urls, 2*replicaBenchPublishers)
		}
		pub, all := round(urls, n)
		s.events += n
		s.pub += pub
		s.send += all
	}
	run(one, 2*replicaBenchPublishers) // first connections, not measured
	*one = side{name: "one", replicas: 1}
	per := max(b.N/8, replicaBenchPublishers)
	b.ResetTimer()
	for r := range 4 {
		sides := []*side{one, two}
		for i := range sides {
			run(sides[(r+i)%2], per) // who goes first alternates too
		}
		yard.pub += publish([]string{yardURL}, per)
		yard.events += per
	}
	b.StopTimer()
	rate := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	for _, s := range []*side{one, two} {
		b.ReportMetric(rate(s.events, s.pub), s.name+"-events/s")
		b.ReportMetric(rate(s.events*webhook.MaxEndpointsPerStore, s.send), s.name+"-deliveries/s")
	}
	b.ReportMetric(rate(yard.events, yard.pub), "yard-events/s")
	b.ReportMetric(rate(two.events, two.pub)/rate(one.events, one.pub), "publish-ratio")
	b.ReportMetric(rate(two.events, two.send)/rate(one.events, one.send), "send-ratio")
}

// benchPost posts body with key to url and fails b unless it is answered
// want.
func benchPost(b *testing.B, url, key, body string, want int) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		b.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		b.Error(fmt.Sprintf("POST %s: %d %s; want %d", url, resp.StatusCode, got, want))
	}
}

// publishYardstick serves, on the Redis at url, a publish that does only
// the store work of the design: the reads a publish makes (one
// MGET of the store's list, counters and five endpoints) and the writes
// of an event to five endpoints in one Apply (each delivery's record
// with the event, its log entry, its queue entry and its endpoint's
// entry among those with something due; the store's pending count), and
// answers 202. No key, body or record is looked at: what the service
// does besides is what one-events/s pays and this does not.
func publishYardstick(b *testing.B, url string) string {
	st, err := redisstore.Open(redisstore.Options{URL: url, Prefix: "yard:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	reads := []string{"eps", "pending", "idem:today", "idem:yesterday", "ep:1", "ep:2", "ep:3", "ep:4", "ep:5"}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := st.GetMany(r.Context(), reads); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		id := fmt.Sprint(n.Add(1))
		rec := make([]byte, len(body)+200) // a delivery's record: the envelope and the ids
		ws := make([]store.Write, 0, 4*webhook.MaxEndpointsPerStore+1)
		now := time.Now()
		for ep := range webhook.MaxEndpointsPerStore {
			dlv := fmt.Sprintf("dlv_%s_%d", id, ep)
			epID := fmt.Sprint("ep:", ep)
			ws = append(ws,
				store.Write{Key: "dlv:" + dlv, Val: rec},
				store.Write{Key: "log:" + epID, Member: dlv, Val: []byte{1}, Score: now.UnixMicro()},
				store.Write{Key: "due:" + epID, Member: dlv, Val: []byte{1}, Score: now.UnixMilli()},
				store.Write{Key: "ready", Member: epID, Val: []byte{1}, Score: now.UnixMilli()})
		}
		ws = append(ws, store.Write{Key: "pending", Add: int64(len(body))})
		if err := st.Apply(r.Context(), ws); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"id":"evt_%s"}`, id)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}
