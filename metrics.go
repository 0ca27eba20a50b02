package main

import (
	"cmp"
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
// deeplink_auth_codes_live, which walks the whole store under each shard's lock:
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

// metrics counts requests by method, route and status, and their
// latencies, for /metrics in the Prometheus text format. Every metric's
// name starts with deeplink_, the service's one prefix. Counting is
// lock-free once a route's counters exist.
type metrics struct {
	routes sync.Map // routeKey -> *routeMetrics
}

// routeKey is a request's labels but its status.
type routeKey struct{ method, route string }

type routeMetrics struct {
	byStatus sync.Map       // int -> *atomic.Int64
	buckets  []atomic.Int64 // one per latencyBuckets bound, then one for the rest: their sum is the count, so a scrape never shows a bucket over it
	sumNanos atomic.Int64
}

func newMetrics() *metrics { return &metrics{} }

// metricMethod is the method label of a request with method m: m itself
// for the methods of RFC 9110 and PATCH, "other" for any other token a
// client sends, which would otherwise make a series each.
func metricMethod(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return m
	}
	return "other"
}

// observe counts a request of the given method, answered with status
// after d. route is the pattern it matched, its method dropped (that is
// the method label's), or a name such as unmatched or starting.
func (m *metrics) observe(method, route string, status int, d time.Duration) {
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	k := routeKey{metricMethod(method), route}
	v, ok := m.routes.Load(k)
	if !ok {
		v, _ = m.routes.LoadOrStore(k, &routeMetrics{buckets: make([]atomic.Int64, len(latencyBuckets)+1)})
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
		var keys []routeKey
		m.routes.Range(func(k, _ any) bool { keys = append(keys, k.(routeKey)); return true })
		slices.SortFunc(keys, func(a, b routeKey) int {
			return cmp.Or(strings.Compare(a.route, b.route), strings.Compare(a.method, b.method))
		})

		b.WriteString("# HELP deeplink_http_requests_total HTTP requests by method, route and status.\n# TYPE deeplink_http_requests_total counter\n")
		for _, k := range keys {
			v, _ := m.routes.Load(k)
			rm := v.(*routeMetrics)
			var codes []int
			rm.byStatus.Range(func(k, _ any) bool { codes = append(codes, k.(int)); return true })
			slices.Sort(codes)
			for _, code := range codes {
				c, _ := rm.byStatus.Load(code)
				fmt.Fprintf(&b, "deeplink_http_requests_total{method=%q,route=%q,status=\"%d\"} %d\n", k.method, k.route, code, c.(*atomic.Int64).Load())
			}
		}
		b.WriteString("# HELP deeplink_http_request_duration_seconds HTTP request latency by method and route.\n# TYPE deeplink_http_request_duration_seconds histogram\n")
		for _, k := range keys {
			v, _ := m.routes.Load(k)
			rm := v.(*routeMetrics)
			var cum int64
			for i, le := range latencyBuckets {
				cum += rm.buckets[i].Load()
				fmt.Fprintf(&b, "deeplink_http_request_duration_seconds_bucket{method=%q,route=%q,le=%q} %d\n", k.method, k.route, strconv.FormatFloat(le, 'g', -1, 64), cum)
			}
			n := cum + rm.buckets[len(latencyBuckets)].Load()
			fmt.Fprintf(&b, "deeplink_http_request_duration_seconds_bucket{method=%q,route=%q,le=\"+Inf\"} %d\n", k.method, k.route, n)
			fmt.Fprintf(&b, "deeplink_http_request_duration_seconds_sum{method=%q,route=%q} %g\n", k.method, k.route, time.Duration(rm.sumNanos.Load()).Seconds())
			fmt.Fprintf(&b, "deeplink_http_request_duration_seconds_count{method=%q,route=%q} %d\n", k.method, k.route, n)
		}
		if s.live != nil {
			fmt.Fprintf(&b, "# HELP deeplink_auth_store_entries Auth codes, redeemed-code markers and sessions held in memory.\n# TYPE deeplink_auth_store_entries gauge\ndeeplink_auth_store_entries %d\n", s.live())
		}
		if s.liveCodes != nil {
			fmt.Fprintf(&b, "# HELP deeplink_auth_codes_live Registered auth codes not yet redeemed or expired.\n# TYPE deeplink_auth_codes_live gauge\ndeeplink_auth_codes_live %d\n", s.liveCodes.value())
		}
		// A copy that never sends (the edge module's) has no attempts to
		// count: its host reports its dispatcher's.
		if hk := s.hooks; hk != nil && !hk.NoLead {
			hk.WriteMetrics(&b)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write([]byte(b.String()))
	}
}
