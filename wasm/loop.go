package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/wire"
)

// loop drives the module's timed work: a tick at least every second (its
// sweeps and syncs), at the next delivery's due time, and when a
// request made one due. It makes the webhook requests the ticks hand out,
// at most egress.MaxInFlight at once (a deleted endpoint's are cancelled
// at the next tick, as the module lists them in wire.Tick.Cancel), and
// reports their outcomes. When ctx ends it cancels the requests under
// way, reports them, and returns.
func (h *host) loop(ctx context.Context) {
	jobCtx, cancelJobs := context.WithCancel(context.Background())
	results := make(chan wire.Result)
	type underWay struct {
		cancel   context.CancelFunc
		instance uint64 // h.instances when its tick handed it out
	}
	jobs := map[uint64]underWay{} // only loop touches it
	sem := make(chan struct{}, egress.MaxInFlight)
	var inflight sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			cancelJobs()
			go func() { inflight.Wait(); close(results) }()
			var rs []wire.Result
			for r := range results {
				rs = append(rs, r)
			}
			h.finish(rs)
			return
		case r := <-results:
			rs := []wire.Result{r}
			for more := true; more; { // report every outcome already waiting in one call
				select {
				case r := <-results:
					rs = append(rs, r)
				default:
					more = false
				}
			}
			for _, r := range rs {
				if j, ok := jobs[r.ID]; ok {
					j.cancel()
					delete(jobs, r.ID)
				}
			}
			h.finish(rs)
			h.pokeIfDue()
			continue
		case <-h.kick:
		case <-timer.C:
		}
		out, instance, err := h.callIn("tick", nil, uint64(time.Now().UnixNano()))
		for _, j := range jobs {
			if j.instance != instance {
				j.cancel() // a replaced instance's
			}
		}
		var t wire.Tick
		if err == nil {
			json.Unmarshal(out, &t)
		}
		for _, id := range t.Cancel {
			if j, ok := jobs[id]; ok {
				j.cancel()
			}
		}
		for _, j := range t.Jobs {
			ctx, cancel := context.WithCancel(jobCtx)
			jobs[j.ID] = underWay{cancel, instance}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				sem <- struct{}{}
				r := egress.Post(ctx, h.client, j.URL, j.Header, j.Body)
				<-sem
				er := wire.Result{ID: j.ID, Status: r.Status, Body: r.Body, DurationNS: int64(r.Duration), Timeout: r.Timeout}
				if r.Err != nil {
					er.Err = r.Err.Error()
					er.Canceled = errors.Is(r.Err, context.Canceled)
				}
				results <- er
			}()
		}
		wait := time.Second
		if t.NextDue != 0 {
			wait = min(wait, max(time.Until(time.Unix(0, t.NextDue)), time.Millisecond))
		}
		timer.Reset(wait)
	}
}

func (h *host) finish(rs []wire.Result) {
	if len(rs) == 0 {
		return
	}
	b, _ := json.Marshal(rs)
	h.call("finish", b)
}
