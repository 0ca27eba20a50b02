//go:build !race

package main

import (
	"testing"
	"time"
)

// net/http sets five deadlines a request: setting one that lies ahead must
// cost no allocation (and no socket call, which TestCoarseDeadline* check).
func TestCoarseDeadlineAllocations(t *testing.T) {
	_, sc, _ := coarsePair(t)
	at := time.Now().Add(time.Minute)
	if n := testing.AllocsPerRun(200, func() {
		sc.SetReadDeadline(at)
		sc.SetWriteDeadline(at)
		sc.SetReadDeadline(time.Time{})
	}); n != 0 {
		t.Errorf("setting deadlines allocates %.1f times, want 0", n)
	}
}
