package main

import (
	"context"
	"time"
)

// loop ticks every instance every second (its guards' sweeps, its
// fairness counts written, the primary's copy of the webhook state caught
// up) until ctx ends.
func (h *host) loop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for i := range h.slots {
				h.call(i, "tick", nil, uint64(now.UnixNano()))
			}
		}
	}
}
