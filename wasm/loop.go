package main

import (
	"context"
	"time"
)

// loop ticks every instance every second (its guards' sweeps, its
// fairness counts written, the primary's copy of the webhook state caught
// up) until ctx ends.
func (h *host) loop(ctx context.Context) {
	everySecond(ctx, func(now time.Time) {
		for i := range h.slots {
			h.call(i, "tick", nil, uint64(now.UnixNano()))
		}
	})
}

// everySecond calls f with the time every second until ctx ends.
func everySecond(ctx context.Context, f func(now time.Time)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}
