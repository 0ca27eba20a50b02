package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/egress"
	"deeplink/internal/signature"
	"deeplink/internal/store"
)

// sender makes the attempts of the deliveries in a queue, for one
// process: it claims as many due deliveries as it has free workers
// (webhooks.workers), sends each, signed with its endpoint's secrets as
// they are then, and writes the outcome into the delivery's record
// before it changes the queue (the next attempt's due time, or the
// delivery's end). It holds only the attempts under way.
//
// Fencing: a delivery's record is written on condition (Write.Old) that
// it still holds the bytes its attempt began from. An attempt whose lease
// ran out, and whose delivery another sender claimed and attempted
// meanwhile, finds more attempts in the record than it began with: its
// outcome is dropped, and it leaves the queue to the other. A record
// changed in another way meanwhile (its endpoint disabled: failed) takes
// the attempt in, keeping its end.
type sender struct {
	q      *queue
	rec    *records
	cfg    config.WebhookConfig
	client *http.Client
	now    func() time.Time
	log    *slog.Logger

	free chan struct{} // a token per idle worker
	wake chan struct{} // Poke's
	wg   sync.WaitGroup

	counts *counters
	// configured reports whether a store is in the configuration: the
	// deliveries of one that is not wait, unsent, until it is again. nil:
	// every store is.
	configured func(storeID string) bool
	// trim is told of each endpoint whose log a delivery ended in, once
	// that is written. nil: none is.
	trim func(ep string)

	mu       sync.Mutex                                // guards underWay
	underWay map[string]map[string]*context.CancelFunc // endpoint id → delivery id → its attempt under way here
}

// busy reports whether this sender has an attempt of the delivery dlv of
// the endpoint ep under way.
func (s *sender) busy(ep, dlv string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.underWay[ep][dlv] != nil
}

// abandon cuts short this sender's attempts to the endpoint ep, which was
// deleted: they give their workers back at once. An endpoint deleted by
// another process is found so by gone within a second.
func (s *sender) abandon(ep string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.underWay[ep] {
		(*cancel)()
	}
}

// gone abandons the attempts under way to endpoints deleted meanwhile
// (by another process: one deleted here was abandoned at once).
func (s *sender) gone(ctx context.Context) {
	s.mu.Lock()
	eps := slices.Collect(maps.Keys(s.underWay))
	s.mu.Unlock()
	for _, ep := range eps {
		if _, err := s.q.st.Get(ctx, hookKey(kindEndpoint, ep)); errors.Is(err, store.ErrNotFound) {
			s.abandon(ep)
		}
	}
}

// track registers cancel as the attempt of the delivery dlv to ep, under
// way until the written outcome; the func returned ends that.
func (s *sender) track(ep, dlv string, cancel *context.CancelFunc) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.underWay[ep] == nil {
		s.underWay[ep] = map[string]*context.CancelFunc{}
	}
	s.underWay[ep][dlv] = cancel
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.underWay[ep], dlv)
		if len(s.underWay[ep]) == 0 {
			delete(s.underWay, ep)
		}
	}
}

// parkedWait is how long a delivery of a store no longer configured
// waits before it is looked at again.
const parkedWait = time.Hour

// senderMargin is what an attempt leaves of its lease for the writes
// that end it: it is cut short that much before the lease ends.
const senderMargin = 2 * time.Second

// senderLease is how long a claim holds: an attempt's timeout and the
// margin for its writes, and more, so that a live sender never loses a
// lease to another.
func senderLease(cfg config.WebhookConfig) time.Duration {
	return cfg.Timeout.D() + 2*senderMargin + time.Second
}

// pollEvery bounds how long an idle sender waits before it looks at the
// queue again: what another replica queued and does not send itself
// (all its workers busy), or what a dead replica's leases left, is taken
// within it.
const pollEvery = time.Second

func newSender(st store.Store, cfg config.WebhookConfig, client *http.Client, workers int, now func() time.Time, log *slog.Logger) *sender {
	s := &sender{q: &queue{st: st, lease: senderLease(cfg)}, rec: &records{st: st, now: now}, cfg: cfg, client: client, now: now, log: log,
		free: make(chan struct{}, workers), wake: make(chan struct{}, 1), counts: &counters{}, underWay: map[string]map[string]*context.CancelFunc{}}
	for range workers {
		s.free <- struct{}{}
	}
	return s
}

// Poke has the sender look at the queue now: something was queued.
func (s *sender) Poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run claims and sends until ctx ends, then waits for the attempts under
// way, which ctx cancels: their deliveries are given back, due at once.
func (s *sender) run(ctx context.Context) {
	defer s.wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	var looked time.Time // for endpoints deleted under attempts (gone)
	for {
		if time.Since(looked) >= pollEvery {
			s.gone(ctx)
			looked = time.Now()
		}
		wait := pollEvery
		if n := len(s.free); n > 0 {
			cs, err := s.q.claim(ctx, s.now(), n)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("webhooks: cannot claim deliveries; trying again", "err", err)
			}
			for _, c := range cs {
				<-s.free
				s.wg.Add(1)
				go s.work(ctx, c)
			}
			if len(cs) == n {
				wait = 0 // perhaps more due: as soon as a worker is free
			} else if at, ok, err := s.q.next(ctx); err == nil && ok {
				wait = min(wait, max(0, at.Sub(s.now())))
			}
		}
		if wait > 0 || len(s.free) == 0 {
			t.Reset(max(wait, time.Millisecond))
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// work makes c's attempt, and then those of the deliveries of c's
// endpoint that the place it holds is handed on to.
func (s *sender) work(ctx context.Context, c claim) {
	defer func() {
		s.free <- struct{}{}
		s.wg.Done()
		s.Poke()
	}()
	for {
		held, err := s.attempt(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				s.giveBack(c)
				return
			}
			s.log.Warn("webhooks: an attempt's outcome could not be written; the delivery comes due again when its lease ends",
				"endpoint", c.Endpoint, "delivery", c.Delivery, "err", err)
			return
		}
		if ctx.Err() != nil { // stopping: the place is freed, for the next sender
			s.giveBack(claim{Endpoint: c.Endpoint, slot: c.slot})
			return
		}
		next, ok, err := s.q.handOff(ctx, c, s.now(), held)
		if err != nil || !ok {
			return // with an error, the place frees itself when the lease ends
		}
		c = next
	}
}

// orphan drops c's delivery, whose endpoint is gone (a publish that read
// the endpoint before its delete wrote after it): its record and queue
// entry go, and what it held of its store's budget is given back.
func (s *sender) orphan(ctx context.Context, c claim, raw []byte, d *Delivery) error {
	ws := []store.Write{{Key: hookKey(kindDelivery, d.ID), Old: raw}, dueWrite(c, time.Time{})}
	if d.StoreID != "" {
		ws = append(ws, releaseWrite(d.StoreID, 1, len(d.Event.Body)))
	}
	err := s.q.st.Apply(ctx, ws)
	if errors.Is(err, store.ErrConflict) {
		// Changed meanwhile: another's to account for.
		return s.q.setDue(ctx, c, time.Time{})
	}
	return err
}

// writeTimeout bounds the writes that follow an attempt made.
const writeTimeout = 5 * time.Second

// giveBack makes c's delivery (if any) due at once and frees its place:
// for a stop. Best effort: otherwise both come back when the lease ends.
func (s *sender) giveBack(c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c.Delivery != "" {
		s.q.setDue(ctx, c, s.now())
	}
	s.q.st.ZAdd(ctx, queueSlots+c.Endpoint, c.slot, 0)
	s.q.refresh(ctx, c.Endpoint)
}

// attempt makes c's attempt and writes its outcome, then the queue. It
// returns when c's place is held until, when those writes renewed it
// (zero when they did not).
func (s *sender) attempt(ctx context.Context, c claim) (held time.Time, err error) {
	keys := []string{hookKey(kindDelivery, c.Delivery), hookKey(kindEndpoint, c.Endpoint)}
	read, err := s.q.st.GetMany(ctx, keys)
	if err != nil {
		return time.Time{}, err
	}
	raw, epRaw := read[0], read[1]
	if raw == nil {
		return time.Time{}, s.q.setDue(ctx, c, time.Time{}) // deleted with its endpoint
	}
	d, err := decodeRecord[Delivery](keys[0], raw)
	if err != nil {
		return time.Time{}, err
	}
	if d.Status != StatusPending {
		return time.Time{}, s.q.setDue(ctx, c, time.Time{}) // ended by another
	}
	if epRaw == nil {
		return time.Time{}, s.orphan(ctx, c, raw, d)
	}
	e, err := endpointMemo.decode(keys[1], epRaw)
	if err != nil {
		return time.Time{}, err
	}
	if d.Event == nil {
		return time.Time{}, fmt.Errorf("webhooks: delivery %s has no event", d.ID)
	}
	if s.configured != nil && !s.configured(e.StoreID) {
		return time.Time{}, s.q.setDue(ctx, c, s.now().Add(parkedWait))
	}
	if why := e.refusal(d); why != "" {
		_, held, err := s.write(ctx, c, e.StoreID, raw, d, nil, why)
		return held, err
	}
	now, old := s.now(), ""
	if now.Unix() < e.OldSecretEnd {
		old = e.OldSecret
	}
	sig := signature.Sign(e.Secret, old, d.Event.ID, now.Unix(), d.Event.Body)
	a := Attempt{At: now.UnixNano(), URL: e.URL, Timestamp: now.Unix(), Signature: sig.Signature, StdSignature: sig.StdSignature}
	actx, cancel := context.WithDeadline(ctx, c.until.Add(-senderMargin))
	untrack := sync.OnceFunc(s.track(e.ID, d.ID, &cancel)) // busy until the outcome is written
	defer untrack()
	r := egress.Post(actx, s.client, e.URL, DeliveryHeader(sig), d.Event.Body)
	cancel()
	if errors.Is(r.Err, context.Canceled) && ctx.Err() != nil {
		return time.Time{}, ctx.Err() // the sender stops: not an attempt
	}
	a = a.complete(r)
	// The attempt was made: what follows is written whole, a stop
	// meanwhile or not.
	ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	// Judged by the endpoint as it is now: a success closes its failure
	// window even if a failure opened it meanwhile; a failure moves the
	// window on, and takes no retry if the endpoint was disabled
	// meanwhile, or by this failure.
	_, fresh, err := s.rec.endpoint(ctx, e.StoreID, e.ID)
	if errors.Is(err, ErrNoEndpoint) {
		return time.Time{}, s.orphan(ctx, c, raw, d)
	}
	if err != nil {
		return time.Time{}, err
	}
	e, off, err := s.rec.moveWindowOf(ctx, fresh, a.ok(), s.now(), s.cfg.DisableAfter.D())
	if off {
		warnDisabled(s.log, e, s.cfg.DisableAfter.D())
	}
	if err != nil {
		return time.Time{}, err
	}
	refused := ""
	if !a.ok() {
		refused = e.refusal(d)
		if disabled := e; !e.Enabled && fresh.Enabled { // by this failure: its queue fails once the outcome is written
			defer func() {
				if _, err := s.rec.failQueued(ctx, disabled, func(*Delivery) bool { return true }); err != nil {
					s.log.Warn("webhooks: cannot fail the queue of an endpoint disabled as failing; its deliveries fail as they come due", "endpoint", disabled.ID, "err", err)
				}
			}()
		}
	}
	status, held, err := s.write(ctx, c, e.StoreID, raw, d, &a, refused)
	untrack()
	if err != nil || status != StatusPending {
		return held, err
	}
	// An endpoint changed while the outcome was written (disabled, or no
	// longer taking the type) had its queue failed without this delivery,
	// busy then: judged again now, it fails as the others did.
	_, now2, err := s.rec.endpoint(ctx, e.StoreID, e.ID)
	if errors.Is(err, ErrNoEndpoint) || err == nil && now2.refusal(d) == "" {
		return held, nil
	}
	if err != nil {
		return held, err
	}
	_, err = s.rec.failQueued(ctx, now2, func(x *Delivery) bool { return x.ID == d.ID && now2.refusal(x) != "" })
	return held, err
}

// write adds a (nil: none) to d, whose record was raw when the attempt
// began, decides what follows, and writes it in one Apply: the record, on
// condition that it is still raw (fenced: see sender), then the queue,
// the accounting of d's end (endedWrites) and c's place renewed for
// handOff, as long as c's lease holds. refused is why d's endpoint
// refuses it, "" when it does not. It returns d's status, and when c's
// place is held until (zero: not renewed).
func (s *sender) write(ctx context.Context, c claim, storeID string, raw []byte, d *Delivery, a *Attempt, refused string) (status string, held time.Time, err error) {
	began := len(d.Attempts)
	var wasPending bool
	for {
		reason, wait := refused, time.Duration(0)
		status = StatusFailed
		if a != nil {
			d.Attempts = append(d.Attempts, *a)
			status, reason, wait = nextStep(s.cfg.RetrySchedule, len(d.Attempts), a.ok(), refused)
		}
		wasPending = d.Status == StatusPending
		if !wasPending && (a == nil || !a.ok()) {
			// Ended meanwhile (its endpoint disabled): the attempt is
			// told, the end kept, but for a success.
			status, reason = d.Status, d.Reason
		}
		d.Status, d.Reason, d.NextAt = status, reason, 0
		if status == StatusPending {
			d.NextAt = s.now().Add(wait).UnixNano()
		}
		b := d.appendRecord(nil)
		d.written = len(b)
		ws := []store.Write{{Key: hookKey(kindDelivery, d.ID), Val: b, Old: raw}}
		switch {
		case status == StatusPending:
			ws = append(ws, dueWrite(c, time.Unix(0, d.NextAt)))
		case wasPending:
			ws = append(ws, endedWrites(storeID, d)...)
			fallthrough
		default:
			ws = append(ws, dueWrite(c, time.Time{}))
		}
		if now := s.now(); now.Before(c.until) {
			held = now.Add(s.q.lease)
			ws = append(ws, renewWrite(c, held))
		}
		if err = s.q.st.Apply(ctx, ws); !errors.Is(err, store.ErrConflict) {
			break
		}
		var cur *Delivery
		switch raw, cur, err = readRecord[Delivery](ctx, s.q.st, hookKey(kindDelivery, d.ID)); {
		case errors.Is(err, store.ErrNotFound):
			return "", time.Time{}, s.q.setDue(ctx, c, time.Time{})
		case err != nil:
			return "", time.Time{}, err
		case len(cur.Attempts) != began:
			return "", time.Time{}, nil // another sender attempted it since: its outcome stands, and the queue is its
		}
		d, held = cur, time.Time{}
	}
	if err != nil {
		return "", time.Time{}, err
	}
	// The attempt (if any) counted by what it led to, and d's end when it
	// ended here (not failed meanwhile, and counted then).
	att, end := &s.counts.Attempts.Retried, (*atomic.Int64)(nil)
	switch status {
	case StatusSucceeded:
		att, end = &s.counts.Attempts.Succeeded, &s.counts.Ended.Succeeded
	case StatusFailed:
		att, end = &s.counts.Attempts.Failed, &s.counts.Ended.Failed
	}
	if a != nil {
		att.Add(1)
	}
	if wasPending && end != nil {
		end.Add(1)
	}
	if s.trim != nil && status != StatusPending && wasPending {
		s.trim(c.Endpoint)
	}
	return status, held, nil
}
