package main

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		live uint64
		want int
	}{
		{0, 100},
		{16 * mib, 100}, // small heaps: Go's default
		{64 * mib, 100},
		{128 * mib, 50}, // headroom 64 MiB
		{200 * mib, 32},
		{256 * mib, 25},
		{4096 * mib, 25}, // never below a quarter
	}
	for _, tt := range tests {
		if got := gcPercent(tt.live); got != tt.want {
			t.Errorf("gcPercent(%d MiB) = %d; want %d", tt.live/mib, got, tt.want)
		}
	}
}

// currentGCPercent returns GOGC as set now.
func currentGCPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestKeepGCHeadroom(t *testing.T) {
	orig := currentGCPercent()
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	done, cancel := context.WithCancel(context.Background())
	cancel() // one adjustment, then return

	runtime.GC() // settle the live heap, which only a collection changes
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(live)
	tests := []struct {
		env  string
		want int
	}{
		{"", gcPercent(live[0].Value.Uint64())},
		{"150", 77}, // the operator's GOGC stands (77 plays it here)
	}
	for _, tt := range tests {
		t.Setenv("GOGC", tt.env)
		debug.SetGCPercent(77)
		keepGCHeadroom(done, time.Hour)
		if got := currentGCPercent(); got != tt.want {
			t.Errorf("with GOGC=%q, GOGC after keepGCHeadroom = %d; want %d", tt.env, got, tt.want)
		}
	}
}
