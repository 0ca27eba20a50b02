package main

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// costlyGauge is a gauge whose value takes long to compute, such as
// auth_codes_live, which walks the whole store under each shard's lock:
// about 72 ms for a million entries, some 70 ns an entry. /metrics asks
// for no key, so a value is reused for 10 µs for each entry the store held
// when it was computed (10 s for a million entries): scrapes then cost at
// most about 1 % of a core whatever their rate, and a small store is
// counted afresh at each one. The window follows the store's size, not
// the time a count took, which the scheduler can stretch.
type costlyGauge struct {
	compute func() int
	size    func() int // entries to walk, cheap to read

	mu     sync.Mutex // guards the fields below; held while computing
	v      int
	at     time.Time     // when v was computed; zero before the first time
	window time.Duration // how long v is reused
}

// value returns the gauge's value, computing it again if it is due.
func (g *costlyGauge) value() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && time.Since(g.at) < g.window {
		return g.v
	}
	g.window = time.Duration(g.size()) * 10 * time.Microsecond
	g.v = g.compute()
	g.at = time.Now()
	return g.v
}

// latencyBuckets are the upper bounds, in seconds, of the request latency
// histogram.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// metrics counts requests by route and status and their latencies, in the
// Prometheus text format. Counting is lock-free once a route's counters
// exist.
type metrics struct {
	routes sync.Map // route string -> *routeMetrics
}

type routeMetrics struct {
	byStatus sync.Map       // int -> *atomic.Int64
	buckets  []atomic.Int64 // one per latencyBuckets bound, then one for the rest: their sum is the count, so a scrape never shows a bucket over it
	sumNanos atomic.Int64
}

func newMetrics() *metrics { return &metrics{} }

func (m *metrics) observe(route string, status int, d time.Duration) {
	v, ok := m.routes.Load(route)
	if !ok {
		v, _ = m.routes.LoadOrStore(route, &routeMetrics{buckets: make([]atomic.Int64, len(latencyBuckets)+1)})
	}
	rm := v.(*routeMetrics)
	c, ok := rm.byStatus.Load(status)
	if !ok {
		c, _ = rm.byStatus.LoadOrStore(status, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
	sec := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && sec > latencyBuckets[i] {
		i++
	}
	rm.buckets[i].Add(1)
	rm.sumNanos.Add(int64(d))
}

// serve writes every metric; gauges are read from s at scrape time.
func (m *metrics) serve(s *server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		var routes []string
		m.routes.Range(func(k, _ any) bool { routes = append(routes, k.(string)); return true })
		slices.Sort(routes)

		b.WriteString("# HELP http_requests_total Requests by route and status.\n# TYPE http_requests_total counter\n")
		for _, route := range routes {
			v, _ := m.routes.Load(route)
			rm := v.(*routeMetrics)
			var codes []int
			rm.byStatus.Range(func(k, _ any) bool { codes = append(codes, k.(int)); return true })
			slices.Sort(codes)
			for _, code := range codes {
				c, _ := rm.byStatus.Load(code)
				fmt.Fprintf(&b, "http_requests_total{route=%q,status=\"%d\"} %d\n", route, code, c.(*atomic.Int64).Load())
			}
		}
		b.WriteString("# HELP http_request_duration_seconds Request latency by route.\n# TYPE http_request_duration_seconds histogram\n")
		for _, route := range routes {
			v, _ := m.routes.Load(route)
			rm := v.(*routeMetrics)
			var cum int64
			for i, le := range latencyBuckets {
				cum += rm.buckets[i].Load()
				fmt.Fprintf(&b, "http_request_duration_seconds_bucket{route=%q,le=%q} %d\n", route, strconv.FormatFloat(le, 'g', -1, 64), cum)
			}
			n := cum + rm.buckets[len(latencyBuckets)].Load()
			fmt.Fprintf(&b, "http_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", route, n)
			fmt.Fprintf(&b, "http_request_duration_seconds_sum{route=%q} %g\n", route, time.Duration(rm.sumNanos.Load()).Seconds())
			fmt.Fprintf(&b, "http_request_duration_seconds_count{route=%q} %d\n", route, n)
		}
		if s.live != nil {
			fmt.Fprintf(&b, "# HELP auth_store_entries Auth codes, redeemed-code markers and sessions held in memory.\n# TYPE auth_store_entries gauge\nauth_store_entries %d\n", s.live())
		}
		if s.liveCodes != nil {
			fmt.Fprintf(&b, "# HELP auth_codes_live Registered auth codes not yet redeemed or expired.\n# TYPE auth_codes_live gauge\nauth_codes_live %d\n", s.liveCodes.value())
		}
		if hk := s.hooks; hk != nil {
			b.WriteString("# HELP webhook_attempts_total Delivery attempts by outcome: succeeded, failed (the last attempt of a delivery that failed), retried.\n# TYPE webhook_attempts_total counter\n")
			fmt.Fprintf(&b, "webhook_attempts_total{outcome=\"succeeded\"} %d\n", hk.outcomes.succeeded.Load())
			fmt.Fprintf(&b, "webhook_attempts_total{outcome=\"failed\"} %d\n", hk.outcomes.failed.Load())
			fmt.Fprintf(&b, "webhook_attempts_total{outcome=\"retried\"} %d\n", hk.outcomes.retried.Load())
			b.WriteString("# HELP webhook_deliveries_total Deliveries that ended, by outcome: succeeded, or failed (the retries used up, or given up when the endpoint was disabled or stopped taking the type).\n# TYPE webhook_deliveries_total counter\n")
			fmt.Fprintf(&b, "webhook_deliveries_total{outcome=\"succeeded\"} %d\n", hk.ended.succeeded.Load())
			fmt.Fprintf(&b, "webhook_deliveries_total{outcome=\"failed\"} %d\n", hk.ended.failed.Load())
			fmt.Fprintf(&b, "# HELP webhook_queue_depth Deliveries waiting to be sent or under way.\n# TYPE webhook_queue_depth gauge\nwebhook_queue_depth %d\n", hk.queueDepth())
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write([]byte(b.String()))
	}
}
