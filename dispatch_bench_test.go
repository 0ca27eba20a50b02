package main

// Webhook delivery performance (bench/webhook-history.md):
//
//	go test -run '^$' -bench 'DeliveryRatio' -benchtime 20000x .
//	go test -run '^$' -bench 'DeliveryThroughput|DeliveryYardstick' -benchtime 20000x .
//	go test -run '^$' -bench 'PendingDeliveryHeap' -benchtime 1x .
//
// Throughput is measured against a yardstick in the same run: a plain
// http.Client loop that signs and posts the same bodies with the same
// headers, at the same concurrency, to the same kind of local receiver.
// BenchmarkDeliveryRatio alternates the two, A/B/A/B, and reports the
// service's speed as a ratio of the yardstick's (target ≥ 0.7); on a
// small shared host the ratio means far more than either rate alone.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/signature"
	"deeplink/internal/webhook"
)

const (
	// benchStores × benchEndpoints endpoints, each allowed
	// perEndpointInFlight attempts at once: 2 × 4 × 4 = 32, the size of the
	// worker pool, so neither the per-endpoint limit nor the pool caps the
	// other. The yardstick runs benchConcurrency goroutines.
	benchStores      = 2
	benchEndpoints   = 4
	benchConcurrency = benchStores * benchEndpoints * webhook.PerEndpointInFlight
)

// benchOrder is a realistic data.object of order.status.updated.
const benchOrder = `{"id":"ord_01JGQ7ZK3M9X4VB2C8D5E6F7GH","status":"completed","previous_status":"pending",` +
	`"amount":{"value":"49.99","currency":"EUR"},"items":[{"sku":"gems-1200","quantity":1}],` +
	`"customer":{"client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301"},"updated_at":1735689600}`

// benchReceiver is a local merchant endpoint that answers 200 at once and
// closes done when it has had want requests.
type benchReceiver struct {
	*httptest.Server
	count atomic.Int64
	mu    sync.Mutex
	want  int64
	done  chan struct{}
}

func newBenchReceiver(b *testing.B) *benchReceiver {
	rc := &benchReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		n := rc.count.Add(1)
		rc.mu.Lock()
		if n == rc.want && rc.done != nil {
			close(rc.done)
			rc.done = nil
		}
		rc.mu.Unlock()
	}))
	b.Cleanup(rc.Close)
	return rc
}

// expect arranges for the returned channel to close once n more requests
// have arrived.
func (rc *benchReceiver) expect(n int) <-chan struct{} {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.want = rc.count.Load() + int64(n)
	rc.done = make(chan struct{})
	return rc.done
}

// benchConfig is a configuration with stores stores, allow_insecure_urls
// (the receiver is on 127.0.0.1), and a state directory of the benchmark's.
func benchConfig(b *testing.B, stores int) *Config {
	doc := map[string]any{
		"listen":   "127.0.0.1:0",
		"data_dir": b.TempDir(),
		"webhooks": map[string]any{
			"timeout":             "10s",
			"retry_schedule":      []string{"1m", "5m", "30m", "2h", "5h", "10h", "10h"},
			"allow_insecure_urls": true,
		},
	}
	var sts []map[string]any
	for i := range stores {
		sts = append(sts, map[string]any{
			"id": fmt.Sprintf("0c5e0c3e-3333-4000-8000-%012d", i), "name": fmt.Sprint("S", i),
			"api_keys": []string{fmt.Sprintf("ak_bench_webhooks_store_%06d", i)},
		})
	}
	doc["stores"] = sts
	raw, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// benchAddEndpoints gives each configured store n endpoints at url, as
// the create handler does.
func benchAddEndpoints(b *testing.B, hk *webhook.Hooks, n int, url string) {
	for _, st := range hk.Cfg.Stores {
		for range n {
			if _, err := hk.CreateEndpoint(context.Background(), st.ID, webhook.EndpointChange{URL: &url, Events: []string{webhook.EventOrderStatus}}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// deliveryBench is the service side: the whole app (its sender and the
// timed housekeeping) delivering to rc.
type deliveryBench struct {
	a  *app
	rc *benchReceiver
}

func newDeliveryBench(b *testing.B) *deliveryBench {
	a, err := newApp(benchConfig(b, benchStores), slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	rc := newBenchReceiver(b)
	benchAddEndpoints(b, a.srv.hooks, benchEndpoints, rc.URL+"/hooks")
	return &deliveryBench{a: a, rc: rc}
}

// run delivers at least n deliveries and returns how many. Events are
// published as the publish handler does after validating (Hooks.Publish:
// the event's deliveries and their queue entries written in one Apply,
// on disk before it would be answered), from benchConcurrency goroutines;
// each goes to every endpoint of its store, the stores taking turns. So
// this measures publish to delivered, without HTTP on the publishing side.
func (s *deliveryBench) run(b *testing.B, n int) int {
	events := (n + benchEndpoints - 1) / benchEndpoints
	n = events * benchEndpoints
	done := s.rc.expect(n)
	hk := s.a.srv.hooks
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(events); i = next.Add(1) - 1 {
				st := hk.Cfg.Stores[int(i)%len(hk.Cfg.Stores)]
				if _, err := hk.Publish(context.Background(), st.ID, webhook.EventOrderStatus, json.RawMessage(benchOrder), ""); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d deliveries arrived within a minute", s.rc.count.Load()-(s.rc.want-int64(n)), n)
	}
	return n
}

// yardstick is a plain http.Client loop: benchConcurrency goroutines sign
// (signature.Sign, as every attempt is signed) and post the same body with
// the same headers to a receiver like the service's, reading at most
// egress.MaxResponseBody of each answer.
type yardstick struct {
	client *http.Client
	rc     *benchReceiver
	url    string
	secret string
	ev     *webhook.Event
}

func newYardstick(b *testing.B) *yardstick {
	rc := newBenchReceiver(b)
	ev := &webhook.Event{ID: webhook.NewID("evt_"), Type: webhook.EventOrderStatus, CreatedAt: time.Now().Unix()}
	ev.Body = fmt.Appendf(nil, `{"id":%q,"type":%q,"created_at":%d,"data":{"object":%s}}`, ev.ID, ev.Type, ev.CreatedAt, benchOrder)
	tr := &http.Transport{MaxIdleConnsPerHost: benchConcurrency}
	b.Cleanup(tr.CloseIdleConnections)
	return &yardstick{client: &http.Client{Transport: tr}, rc: rc, url: rc.URL + "/hooks", secret: signature.NewSecret(), ev: ev}
}

func (y *yardstick) run(b *testing.B, n int) int {
	done := y.rc.expect(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				now := time.Now()
				sig := signature.Sign(y.secret, "", y.ev.ID, now.Unix(), y.ev.Body)
				req, err := http.NewRequest(http.MethodPost, y.url, strings.NewReader(string(y.ev.Body)))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header = webhook.DeliveryHeader(sig)
				resp, err := y.client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.ReadAll(io.LimitReader(resp.Body, egress.MaxResponseBody))
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("yardstick: status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	<-done
	return n
}

// benchSide times one side and reports its rate and CPU per delivery.
type benchSide struct {
	name string
	run  func(b *testing.B, n int) int
	n    int
	wall time.Duration
	cpu  time.Duration
}

func (s *benchSide) measure(b *testing.B, n int) {
	runtime.GC() // neither side pays for the other's garbage
	cpu0, t0 := processCPU(), time.Now()
	s.n += s.run(b, n)
	s.wall += time.Since(t0)
	s.cpu += processCPU() - cpu0
}

func (s *benchSide) rate() float64 { return float64(s.n) / s.wall.Seconds() }

func (s *benchSide) report(b *testing.B) {
	b.ReportMetric(s.rate(), s.name+"-deliveries/s")
	b.ReportMetric(float64(s.cpu.Nanoseconds())/float64(s.n), s.name+"-cpu-ns/delivery")
}

// benchWarm is a short unmeasured run of each side: first connections,
// signer cache, GC sizing.
const benchWarm = 2 * benchConcurrency

// BenchmarkDeliveryThroughput is the service alone: b.N deliveries.
func BenchmarkDeliveryThroughput(b *testing.B) {
	svc := newDeliveryBench(b)
	svc.run(b, benchWarm)
	s := &benchSide{name: "service", run: svc.run}
	b.ResetTimer()
	s.measure(b, b.N)
	s.report(b)
}

// BenchmarkDeliveryYardstick is the yardstick alone: b.N requests.
func BenchmarkDeliveryYardstick(b *testing.B) {
	y := newYardstick(b)
	y.run(b, benchWarm)
	s := &benchSide{name: "yardstick", run: y.run}
	b.ResetTimer()
	s.measure(b, b.N)
	s.report(b)
}

// BenchmarkDeliveryRatio runs both sides alternately, A/B/A/B in four
// rounds of b.N/4 deliveries each side, and reports the service's
// deliveries per second as a ratio of the yardstick's.
func BenchmarkDeliveryRatio(b *testing.B) {
	svc, y := newDeliveryBench(b), newYardstick(b)
	svc.run(b, benchWarm)
	y.run(b, benchWarm)
	alternate(b, &benchSide{name: "service", run: svc.run}, &benchSide{name: "yardstick", run: y.run})
}

// alternate runs sides a and b in turn, A/B/A/B in four rounds of b.N/4
// each side, and reports each side's figures and a's deliveries per
// second as a ratio of b's.
func alternate(bm *testing.B, a, b *benchSide) {
	sides := []*benchSide{a, b}
	const rounds = 4
	per := max(bm.N/rounds/2, benchConcurrency)
	bm.ResetTimer()
	for round := range rounds {
		for i := range sides {
			sides[(round+i)%2].measure(bm, per) // who goes first alternates too
		}
	}
	bm.StopTimer()
	for _, s := range sides {
		s.report(bm)
	}
	bm.ReportMetric(a.rate()/b.rate(), "ratio")
}

// BenchmarkPendingDeliveryHeap holds 100,000 pending deliveries to dead
// endpoints (20,000 events published to 4 stores of 5 endpoints each) and
// reports the live heap per pending delivery, before any attempt: its
// record, its event in it, and its entries in the log and the queue of
// the embedded store. Nothing runs in the background (openApp starts no
// goroutine); the events go through the real publish handler.
func BenchmarkPendingDeliveryHeap(b *testing.B) {
	const (
		stores    = 4
		events    = 20_000
		endpoints = webhook.MaxEndpointsPerStore
		pending   = events * endpoints
	)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL + "/hooks"
	dead.Close()

	var never float64
	for range b.N {
		cfg := benchConfig(b, stores)
		a, err := openApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
		if err != nil {
			b.Fatal(err)
		}
		hk := a.srv.hooks
		benchAddEndpoints(b, hk, endpoints, deadURL)
		h := a.srv.handler()

		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		body := `{"type":"order.status.updated","data":{"object":` + benchOrder + `}}`
		for i := range events {
			st := cfg.Stores[i%stores]
			r := httptest.NewRequest(http.MethodPost, "/stores/"+st.ID+"/events", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-API-Key", st.APIKeys[0])
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusAccepted {
				b.Fatalf("publish: %d %s", w.Code, w.Body)
			}
		}
		if n, err := hk.QueueDepth(b.Context()); err != nil || n != pending {
			b.Fatalf("%d deliveries queued (%v), want %d", n, err, pending)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		runtime.KeepAlive(a)
		never = float64(m1.HeapAlloc-m0.HeapAlloc) / pending
	}
	b.ReportMetric(never, "B/delivery")
}
