package main

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// metricValue returns the value of the sample line that starts with
// series in the /metrics answer, or -1 when there is none.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

func TestMetrics(t *testing.T) {
	a, ts := startService(t, cfgOpts{})
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(ts.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	before := scrape()
	r1 := mustRegister(t, ts, storeA, keyA)
	mustRegister(t, ts, storeA, keyA)
	requireToken(t, postForm(t, tokenURL(ts, storeA), r1.form()))
	resp, err := http.Get(registerURL(ts, storeA)) // 405
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, http.StatusNotFound, call(t, "BREW", ts.URL+"/coffee", nil).status)
	after := scrape()

	tests := []struct {
		series      string
		before, now float64
	}{
		{`deeplink_http_requests_total{method="POST",route="/stores/{store_id}/auth/auth-code",status="200"}`, -1, 2},
		{`deeplink_http_requests_total{method="POST",route="/stores/{store_id}/auth/token",status="200"}`, -1, 1},
		{`deeplink_http_request_duration_seconds_count{method="POST",route="/stores/{store_id}/auth/auth-code"}`, -1, 2},
		{`deeplink_http_requests_total{method="GET",route="/stores/{store_id}/auth/auth-code",status="405"}`, -1, 1}, // by its path, not "unmatched"
		{`deeplink_http_requests_total{method="other",route="unmatched",status="404"}`, -1, 1},                       // an unknown method is "other"
		{`deeplink_http_requests_total{method="GET",route="/metrics",status="200"}`, -1, 1},
		{`deeplink_auth_codes_live`, 0, 1}, // one registered code is left; the other was redeemed
		{`deeplink_webhook_queue_depth`, 0, 0},
		{`deeplink_webhook_attempts_total{outcome="succeeded"}`, 0, 0},
	}
	for _, tt := range tests {
		if got := metricValue(t, before, tt.series); got != tt.before {
			t.Errorf("before: %s = %v; want %v", tt.series, got, tt.before)
		}
		if got := metricValue(t, after, tt.series); got != tt.now {
			t.Errorf("after: %s = %v; want %v", tt.series, got, tt.now)
		}
	}

	// An empty value, which no request writes but a damaged file whose
	// checksums hold could restore, is no code, and no panic.
	require.NoError(t, a.store.Insert(t.Context(), Key{1}.name(), nil, time.Now().Add(time.Hour)))
	if got := metricValue(t, scrape(), "deeplink_auth_codes_live"); got != 1 {
		t.Errorf("with an empty value: deeplink_auth_codes_live = %v; want 1", got)
	}
}

// TestCostlyGauge: a value is reused for 10 µs an entry of the store it
// counted, and computed afresh after.
func TestCostlyGauge(t *testing.T) {
	calls, size := 0, 0
	g := &costlyGauge{compute: func() int { calls++; return calls }, size: func() int { return size }}
	if v := g.value(); v != 1 {
		t.Fatalf("first value() = %d; want 1", v)
	}
	if v := g.value(); v != 2 {
		t.Errorf("value() of an empty store = %d; want 2, computed afresh", v)
	}
	size = 1_000_000
	g.value() // computed (the window was an empty store's), with a window of 10 s
	if v := g.value(); v != 3 || calls != 3 {
		t.Errorf("value() within 10 s of counting a million entries = %d after %d computations; want 3 after 3", v, calls)
	}
	g.at = time.Now().Add(-11 * time.Second)
	if v := g.value(); v != 4 {
		t.Errorf("value() 11 s after = %d; want 4", v)
	}
}

// TestPromtoolCheckMetrics: a scrape of /metrics, after requests that
// give every metric a series, passes promtool check metrics, Prometheus'
// own check of the text format and its naming conventions.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := needTool(t, "promtool")
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
	call(t, http.MethodGet, registerURL(ts, storeA), nil) // 405
	call(t, http.MethodGet, ts.URL+"/no/such/path", nil)
	got := call(t, http.MethodGet, ts.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, got.status)
	for _, name := range []string{"deeplink_http_requests_total", "deeplink_http_request_duration_seconds", "deeplink_auth_store_entries",
		"deeplink_auth_codes_live", "deeplink_webhook_attempts_total", "deeplink_webhook_deliveries_total", "deeplink_webhook_queue_depth"} {
		require.Contains(t, string(got.body), "\n# TYPE "+name+" ", "the scrape has %s", name)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(got.body)), "\n") {
		if !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "deeplink_") {
			t.Errorf("metric line %q; want every metric named deeplink_…", line)
		}
	}

	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(got.body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check metrics = %v\n%s\nof the scrape:\n%s", err, out, got.body)
	}
	t.Logf("promtool check metrics: ok %s", bytes.TrimSpace(out))
}
