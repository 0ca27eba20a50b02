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
// ratio of one's: publish-ratio and send-ratio.
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

	// round publishes n events through urls and waits for their 5n
	// deliveries; it returns how long the publishing and the whole took.
	round := func(urls []string, n int) (pub, all time.Duration) {
		mu.Lock()
		want = arrived + int64(n*webhook.MaxEndpointsPerStore)
		delivered := make(chan struct{})
		done = delivered
		mu.Unlock()
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
		pub = time.Since(t0)
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
	}
	b.StopTimer()
	rate := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	for _, s := range []*side{one, two} {
		b.ReportMetric(rate(s.events, s.pub), s.name+"-events/s")
		b.ReportMetric(rate(s.events*webhook.MaxEndpointsPerStore, s.send), s.name+"-deliveries/s")
	}
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
