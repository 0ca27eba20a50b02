package serving

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLatencyHistogram: each observation lands in the first bucket whose
// bound it is within, or past the last; the buckets are cumulative and
// +Inf and _count are their total.
func TestLatencyHistogram(t *testing.T) {
	m := &Metrics{}
	for _, d := range []time.Duration{300 * time.Microsecond, 500 * time.Microsecond, 40 * time.Millisecond, 3 * time.Second} {
		m.Observe("GET", "GET /r", http.StatusOK, d)
	}
	var b strings.Builder
	m.WriteText(&b)
	body := b.String()
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{`deeplink_http_request_duration_seconds_bucket{method="GET",route="/r",le="0.0005"}`, 2}, // a bound is inclusive
		{`deeplink_http_request_duration_seconds_bucket{method="GET",route="/r",le="0.025"}`, 2},
		{`deeplink_http_request_duration_seconds_bucket{method="GET",route="/r",le="0.05"}`, 3},
		{`deeplink_http_request_duration_seconds_bucket{method="GET",route="/r",le="2.5"}`, 3},
		{`deeplink_http_request_duration_seconds_bucket{method="GET",route="/r",le="+Inf"}`, 4},
		{`deeplink_http_request_duration_seconds_count{method="GET",route="/r"}`, 4},
		{`deeplink_http_request_duration_seconds_sum{method="GET",route="/r"}`, 3.0408},
	} {
		if line := tt.series + " " + strconv.FormatFloat(tt.want, 'g', -1, 64) + "\n"; !strings.Contains(body, line) {
			t.Errorf("WriteText has no line %q; it wrote:\n%s", line, body)
		}
	}
}

// TestNilMetrics: a nil *Metrics (the edge module's) counts nothing and
// writes nothing.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Observe("GET", "GET /r", http.StatusOK, time.Millisecond)
	var b strings.Builder
	m.WriteText(&b)
	if b.Len() != 0 {
		t.Errorf("WriteText of a nil *Metrics wrote %q; want nothing", b.String())
	}
}
