//go:build !wasip1

package main

import "time"

// pacer spaces out long background work, the store's flush and sweep, so
// that requests keep being served while it runs. runtime.Gosched is not
// enough: the scheduler polls the network only once it runs out of
// runnable goroutines, and a goroutine that keeps yielding stays runnable,
// so requests that arrived meanwhile waited for the runtime's monitor
// thread to poll, up to 10 ms later. A short sleep takes the work off the
// run queues: what arrived is polled and served first. With the service
// alone on one core (PIN=1 bench/run.sh) this took the register p99 from
// 8.7 ms to about 4 ms, at the same throughput.
//
// The zero pacer is ready to use; one pacer serves one run of work, from
// one goroutine. A nil pacer never pauses.
type pacer struct {
	since time.Time // when the work started or last paused
}

const (
	pacerBudget = 250 * time.Microsecond // work between pauses
	pacerPause  = time.Millisecond       // long enough to poll and serve what waits
)

// yield pauses the work once it has run for pacerBudget since it started
// or last paused.
func (p *pacer) yield() {
	if p == nil {
		return
	}
	now := time.Now()
	switch {
	case p.since.IsZero():
		p.since = now
	case now.Sub(p.since) >= pacerBudget:
		time.Sleep(pacerPause)
		p.since = time.Now()
	}
}
