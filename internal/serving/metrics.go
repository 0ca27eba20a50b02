package serving

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyBuckets are the upper bounds, in seconds, of the request latency
// histogram.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Metrics counts requests by method, route and status, and their
// latencies, for /metrics in the Prometheus text format: in the native
// build the server's, in the edge build the host's, which answers every
// request, whichever instance served it. Counting is lock-free once a
// route's counters exist. A nil *Metrics counts nothing and writes
// nothing (the edge module's: its host counts).
type Metrics struct {
	routes sync.Map // routeKey -> *routeMetrics
}

// routeKey is a request's labels but its status.
type routeKey struct{ method, route string }

type routeMetrics struct {
	byStatus sync.Map       // int -> *atomic.Int64
	buckets  []atomic.Int64 // one per latencyBuckets bound, then one for the rest: their sum is the count, so a scrape never shows a bucket over it
	sumNanos atomic.Int64
}

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

// Observe counts a request of the given method, answered with status
// after d. route is the pattern it matched, its method dropped (that is
// the method label's), or a name such as unmatched or starting.
func (m *Metrics) Observe(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
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

// WriteText writes deeplink_http_requests_total and
// deeplink_http_request_duration_seconds to w in the Prometheus text
// format, series sorted by route and method.
func (m *Metrics) WriteText(w io.Writer) {
	if m == nil {
		return
	}
	var keys []routeKey
	m.routes.Range(func(k, _ any) bool { keys = append(keys, k.(routeKey)); return true })
	slices.SortFunc(keys, func(a, b routeKey) int {
		return cmp.Or(strings.Compare(a.route, b.route), strings.Compare(a.method, b.method))
	})
	io.WriteString(w, "# HELP deeplink_http_requests_total HTTP requests by method, route and status.\n# TYPE deeplink_http_requests_total counter\n")
	for _, k := range keys {
		v, _ := m.routes.Load(k)
		rm := v.(*routeMetrics)
		var codes []int
		rm.byStatus.Range(func(k, _ any) bool { codes = append(codes, k.(int)); return true })
		slices.Sort(codes)
		for _, code := range codes {
			c, _ := rm.byStatus.Load(code)
			fmt.Fprintf(w, "deeplink_http_requests_total{method=%q,route=%q,status=\"%d\"} %d\n", k.method, k.route, code, c.(*atomic.Int64).Load())
		}
	}
	io.WriteString(w, "# HELP deeplink_http_request_duration_seconds HTTP request latency by method and route.\n# TYPE deeplink_http_request_duration_seconds histogram\n")
	for _, k := range keys {
		v, _ := m.routes.Load(k)
		rm := v.(*routeMetrics)
		var cum int64
		for i, le := range latencyBuckets {
			cum += rm.buckets[i].Load()
			fmt.Fprintf(w, "deeplink_http_request_duration_seconds_bucket{method=%q,route=%q,le=%q} %d\n", k.method, k.route, strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		n := cum + rm.buckets[len(latencyBuckets)].Load()
		fmt.Fprintf(w, "deeplink_http_request_duration_seconds_bucket{method=%q,route=%q,le=\"+Inf\"} %d\n", k.method, k.route, n)
		fmt.Fprintf(w, "deeplink_http_request_duration_seconds_sum{method=%q,route=%q} %g\n", k.method, k.route, time.Duration(rm.sumNanos.Load()).Seconds())
		fmt.Fprintf(w, "deeplink_http_request_duration_seconds_count{method=%q,route=%q} %d\n", k.method, k.route, n)
	}
}
