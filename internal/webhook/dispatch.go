package webhook

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/store"
)

// Delivery: the sender (sender.go) claims due deliveries from the queue in
// the store (queue.go), each with one of its endpoint's
// PerEndpointInFlight places, and sends them with a fixed pool of
// workers. So a slow or dead endpoint holds at most PerEndpointInFlight
// workers of all the processes, and the pool of one (DispatchWorkers) has
// room for every endpoint the stores may have to hold that many with one
// worker still free: however many endpoints are slow or dead, none delays
// another.
const (
	PerEndpointInFlight = 4
	MinDispatchWorkers  = 32
	MaxDispatchWorkers  = egress.MaxInFlight // about 8 MiB of idle goroutines
)

// DispatchWorkers is the size of the pool for a configuration of stores
// stores (each up to MaxEndpointsPerStore endpoints), within
// [MinDispatchWorkers, MaxDispatchWorkers]. Past 51 stores the bound no
// longer holds for every endpoint at once: 256 endpoints, all slow at
// their limit, would take every worker.
func DispatchWorkers(stores int) int {
	return min(MaxDispatchWorkers, max(MinDispatchWorkers, stores*MaxEndpointsPerStore*PerEndpointInFlight+1))
}

// Workers is the size of this process's pool of delivery workers:
// webhooks.workers, or when 0, DispatchWorkers of the stores configured.
func (hk *Hooks) Workers() int {
	if n := hk.Cfg.Webhooks.Workers; n > 0 {
		return n
	}
	return DispatchWorkers(len(hk.Cfg.Stores))
}

// Start runs the sender, but where NoSend is set.
func (hk *Hooks) Start() error {
	if hk.NoSend {
		return nil
	}
	w := hk.Cfg.Webhooks
	workers := hk.Workers()
	client, err := egress.NewClient(egress.Options{
		Timeout: w.Timeout.D(), AllowPrivate: w.AllowInsecureURLs,
		// Endpoints of many stores may share a host; the pool bounds the
		// connections in use, so keeping as many idle spares no redial.
		TrustedCAFile: w.TrustedCAFile, MaxIdleConnsPerHost: workers,
	})
	if err != nil {
		return err
	}
	s := newSender(hk.sendSt(), w, client, workers, hk.Now, hk.Log)
	s.counts = &hk.counts
	s.configured = func(id string) bool { return hk.Cfg.Store(id) != nil }
	s.trim = hk.trim
	s.rec.failed, s.rec.busy = hk.failed, s.busy
	ctx, cancel := context.WithCancel(context.Background())
	hk.send, hk.stop, hk.done, hk.closeIdle = s, cancel, make(chan struct{}), client.CloseIdleConnections
	go func() {
		defer close(hk.done)
		s.run(ctx)
	}()
	return nil
}

// Stop stops the sender. Attempts under way are cut short and their
// deliveries given back, due at once, for the next sender.
func (hk *Hooks) Stop() {
	if hk.stop == nil {
		return
	}
	hk.stop()
	<-hk.done
	hk.closeIdle()
	hk.stop, hk.send = nil, nil
}

// Poke has this process's sender look at the queue now: something was
// queued. It never waits.
func (hk *Hooks) Poke() {
	if s := hk.send; s != nil {
		s.Poke()
	}
}

// sendSt is the store the sender writes through.
func (hk *Hooks) sendSt() store.Store { return cmp.Or(hk.SendSt, hk.St) }

// failed counts ds, deliveries of the store that ended without their
// sender (failed with their endpoint's queue), and writes what follows:
// each one's endedWrites, and a trim of its endpoint's log.
func (hk *Hooks) failed(ctx context.Context, storeID string, ds []*Delivery) {
	for _, d := range ds {
		hk.counts.Ended.Failed.Add(1)
		// The delivery has ended, whatever befell the caller's context.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		err := hk.sendSt().Apply(wctx, endedWrites(storeID, d))
		cancel()
		if err != nil {
			hk.Log.Warn("webhooks: cannot account for a delivery that ended", "endpoint", d.EndpointID, "err", err)
		}
		hk.trim(d.EndpointID)
	}
}

// trim trims the endpoint ep's log soon (trims): a delivery of it ended.
func (hk *Hooks) trim(ep string) {
	hk.trims.soon(ep, func() {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		r := &records{st: hk.sendSt(), now: hk.Now}
		if _, err := r.trim(ctx, ep, hk.Cfg.Webhooks.DeliveryLogSize, hk.Budget.Log); err != nil {
			hk.Log.Warn("webhooks: cannot trim a delivery log; trying again as the next delivery ends", "endpoint", ep, "err", err)
		}
	})
}

// trimEvery is how often one process trims an endpoint's log at most:
// trimming reads the log's members.
const trimEvery = 100 * time.Millisecond

// trims runs each endpoint's trim at most every trimEvery, and once more
// after the last call that came meanwhile: the log is trimmed within
// trimEvery of a delivery's end.
type trims struct {
	mu      sync.Mutex           // guards the maps
	last    map[string]time.Time // endpoint id → when its last trim began
	pending map[string]bool      // endpoint id → one is due: running, or waiting for trimEvery
}

// soon runs f for the endpoint ep now, or within trimEvery when one ran
// less than that ago (only once however often soon is called meanwhile).
func (t *trims) soon(ep string, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[ep] {
		return
	}
	if t.pending == nil {
		t.last, t.pending = map[string]time.Time{}, map[string]bool{}
	}
	t.pending[ep] = true
	run := func() {
		t.mu.Lock()
		t.last[ep] = time.Now()
		delete(t.pending, ep)
		t.mu.Unlock()
		f()
	}
	if wait := trimEvery - time.Since(t.last[ep]); wait > 0 {
		time.AfterFunc(wait, run)
		return
	}
	go run()
}

// Tick does the timed housekeeping of the stores configured: an endpoint
// failing for webhooks.disable_after whose deliveries have all ended gets
// no more outcomes, and is disabled here (on hk.Now, as its failure
// window is kept); a rotation's old secret that no longer signs goes.
// The store forgets expired Idempotency-Keys by itself.
func (hk *Hooks) Tick(now time.Time) error {
	if hk.NoSend {
		return nil // the process that sends keeps house: the edge host, for its module
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r := hk.rec()
	after := hk.Cfg.Webhooks.DisableAfter.D()
	var errs error
	for _, sc := range hk.Cfg.Stores {
		eps, err := r.storeEndpoints(ctx, sc.ID)
		if err != nil {
			return err
		}
		for _, e := range eps {
			if e.Enabled && e.FailingSince != 0 {
				e, disabled, err := r.moveWindowOf(ctx, e, false, hk.Now(), after)
				if disabled {
					_, err = r.failQueued(ctx, e, func(*Delivery) bool { return true })
					warnDisabled(hk.Log, e, after)
				}
				errs = errors.Join(errs, err)
			}
			if e.OldSecret != "" && now.Unix() >= e.OldSecretEnd {
				_, err := r.changeEndpoint(ctx, e.StoreID, e.ID, func(e *Endpoint) error {
					if now.Unix() >= e.OldSecretEnd {
						e.OldSecret, e.OldSecretEnd = "", 0
					}
					return nil
				})
				errs = errors.Join(errs, err)
			}
		}
	}
	return errs
}

// warnDisabled says, at WARN, that e was disabled as failing for after.
func warnDisabled(log *slog.Logger, e *Endpoint, after time.Duration) {
	log.Warn("webhooks: endpoint disabled: every attempt failed for webhooks.disable_after; a PATCH with enabled true turns it back on",
		"store", e.StoreID, "endpoint", e.ID, "failing_since", time.Unix(0, e.FailingSince).UTC().Format(time.RFC3339),
		"disable_after", after.String())
}

// QueueDepth returns the deliveries of the stores configured that wait to
// be sent or are under way.
func (hk *Hooks) QueueDepth(ctx context.Context) (int, error) {
	n := 0
	for _, sc := range hk.Cfg.Stores {
		_, ids, err := hk.rec().endpointIDs(ctx, sc.ID)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			ms, err := hk.St.ZRange(ctx, queueDue+id, math.MinInt64, math.MaxInt64, 0, false)
			if err != nil {
				return 0, err
			}
			n += len(ms)
		}
	}
	return n, nil
}
