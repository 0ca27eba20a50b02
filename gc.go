package main

import (
	"context"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// The store keeps most of the heap live, and Go's default setting
// (GOGC=100) lets the heap grow by as much again before it collects. With a
// million codes live that is 300 MB of request garbage between two
// collections: every allocation then lands on memory long out of the CPU's
// caches, much of it freshly faulted in, and the process holds twice what
// it needs. keepGCHeadroom instead sets GOGC so that the heap may grow by
// gcHeadroom past what is live, but by no less than a quarter of it (so a
// large pointer-rich heap, such as many pending deliveries, is never
// collected more than four times as often as Go would) and by no more
// than Go's default. An operator's GOGC wins: when it is set, the
// collector is left alone.
const (
	gcHeadroom   = 64 << 20
	gcMinPercent = 25
)

// gcPercent is the GOGC that gives a heap of live bytes its headroom.
func gcPercent(live uint64) int {
	if live == 0 {
		return 100
	}
	return int(min(100, max(gcMinPercent, gcHeadroom*100/live)))
}

// keepGCHeadroom adjusts GOGC to the live heap every interval until ctx
// ends, unless GOGC is set in the environment.
func keepGCHeadroom(ctx context.Context, interval time.Duration) {
	if os.Getenv("GOGC") != "" {
		return
	}
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := -1
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rtmetrics.Read(live)
		if p := gcPercent(live[0].Value.Uint64()); p != set {
			debug.SetGCPercent(p)
			set = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
