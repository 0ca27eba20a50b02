package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
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

// serveMetrics writes every metric: the requests' (none in the edge
// module, whose host counts them), then gauges read at scrape time.
func (s *server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	s.metrics.WriteText(&b)
	if s.live != nil {
		fmt.Fprintf(&b, "# HELP deeplink_auth_store_entries Auth codes, redeemed-code markers and sessions held in memory.\n# TYPE deeplink_auth_store_entries gauge\ndeeplink_auth_store_entries %d\n", s.live())
	}
	if s.liveCodes != nil {
		fmt.Fprintf(&b, "# HELP deeplink_auth_codes_live Registered auth codes not yet redeemed or expired.\n# TYPE deeplink_auth_codes_live gauge\ndeeplink_auth_codes_live %d\n", s.liveCodes.value())
	}
	// A process that never sends (the edge module) has no attempts to
	// count: its host reports its sender's.
	if hk := s.hooks; hk != nil && !hk.NoSend {
		hk.WriteMetrics(&b)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}
