//go:build unix

package main

import (
	"testing"
	"time"
)

// TestWatchSee: a call is timed from when the watchdog first sees it, on
// the watchdog's clock, across the times it is in the host, and a new
// call starts again.
func TestWatchSee(t *testing.T) {
	const limit = 2 * time.Second
	type look struct {
		at      time.Duration // since the watchdog started
		id      int64         // what the slot reads
		overdue bool
	}
	tests := []struct {
		name  string
		looks []look
	}{
		{"idle", []look{{0, 0, false}, {time.Hour, 0, false}}},
		{"a call past the limit and the grace", []look{{0, 7, false}, {limit, 7, false}, {limit + watchdogGrace - 1, 7, false}, {limit + watchdogGrace, 7, true}}},
		{"time in the host counts", []look{{0, 7, false}, {time.Second, -7, false}, {limit + watchdogGrace, 7, true}}},
		{"first seen in the host", []look{{0, -7, false}, {limit + watchdogGrace, -7, false}, {limit + watchdogGrace + 1, 7, true}}},
		{"a new call starts again", []look{{0, 7, false}, {limit, 8, false}, {limit + watchdogGrace, 8, false}, {2*limit + watchdogGrace, 8, true}}},
		{"in the host past the limit: left be", []look{{0, 7, false}, {time.Hour, -7, false}}},
		{"ended", []look{{0, 7, false}, {time.Hour, 0, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			var w watch
			for _, l := range tt.looks {
				if _, overdue := w.see(l.id, start.Add(l.at), limit); overdue != l.overdue {
					t.Errorf("see(%d) at %v = overdue %v; want %v", l.id, l.at, overdue, l.overdue)
				}
			}
		})
	}
}
