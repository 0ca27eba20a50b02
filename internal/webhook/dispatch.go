package webhook

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"deeplink/internal/egress"
)

// Delivery: pending deliveries wait in one timer heap (never a goroutine or
// timer each); one scheduler goroutine moves the due ones to a ready list,
// unless their endpoint already has perEndpointInFlight attempts under way,
// in which case they wait on the endpoint. A fixed pool of workers takes
// from the ready list. So a slow or dead endpoint holds at most
// perEndpointInFlight workers, and the pool (dispatchWorkers) has room for
// every endpoint the stores may have to hold that many with one worker
// still free: however many endpoints are slow or dead, none delays another.
const (
	PerEndpointInFlight = 4
	MinDispatchWorkers  = 32
	MaxDispatchWorkers  = egress.MaxInFlight // about 8 MiB of idle goroutines
)

// dispatchWorkers is the size of the pool for a configuration of stores
// stores (each up to maxEndpointsPerStore endpoints), within
// [minDispatchWorkers, maxDispatchWorkers]. Past 51 stores the bound no
// longer holds for every endpoint at once: 256 endpoints, all slow at
// their limit, would take every worker.
func DispatchWorkers(stores int) int {
	return min(MaxDispatchWorkers, max(MinDispatchWorkers, stores*MaxEndpointsPerStore*PerEndpointInFlight+1))
}

// Workers is the size of this process's pool of delivery workers:
// webhooks.workers, or when that is 0, DispatchWorkers of the stores
// configured.
func (hk *Hooks) Workers() int {
	if n := hk.Cfg.Webhooks.Workers; n > 0 {
		return n
	}
	return DispatchWorkers(len(hk.Cfg.Stores))
}

// timerHeap orders pending deliveries by their next attempt.
type timerHeap []*Delivery

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].NextAt < h[j].NextAt }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].Index = i; h[j].Index = j }
func (h *timerHeap) Push(x any)        { d := x.(*Delivery); d.Index = len(*h); *h = append(*h, d) }
func (h *timerHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.Index = -1
	return d
}
func (h *timerHeap) Remove(d *Delivery) { heap.Remove(h, d.Index) }

// dispatcher is the running side of hooks: its goroutines and HTTP
// client. A copy that never sends has none (the edge module's: its host
// runs the dispatcher).
type dispatcher struct {
	client *http.Client
	// closeIdle is client.CloseIdleConnections, called through a func
	// set by Start so that a copy that never starts (the edge module's)
	// does not link the HTTP client and its TLS, dialer and resolver.
	closeIdle func()
	ctx       context.Context // cancelled by stop: attempts under way are abandoned and stay pending
	cancel    context.CancelFunc
	cond      *sync.Cond // on hooks.mu; signalled when ready grows
	wg        sync.WaitGroup
}

// scheduleLocked puts the pending d in the timer heap. hk.Mu must be held.
func (hk *Hooks) scheduleLocked(d *Delivery) {
	heap.Push(&hk.Sched, d)
	if d.Index == 0 {
		hk.Poke()
	}
}

// Poke tells the scheduler goroutine to look again now: the deliveries
// due, and (a shared sender) what the others wrote. It never waits.
func (hk *Hooks) Poke() {
	select {
	case hk.wake <- struct{}{}:
	default:
	}
}

// start launches the scheduler and the workers.
func (hk *Hooks) Start() error {
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
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{client: client, closeIdle: client.CloseIdleConnections, ctx: ctx, cancel: cancel, cond: sync.NewCond(&hk.Mu)}
	hk.Mu.Lock()
	hk.d = d
	hk.Mu.Unlock()
	d.wg.Add(1 + workers)
	go hk.scheduler()
	for range workers {
		go hk.worker()
	}
	return nil
}

// stop ends the goroutines. Attempts under way are cancelled and their
// deliveries stay pending, due at once, to be sent after a restart.
func (hk *Hooks) Stop() {
	hk.Mu.Lock()
	d := hk.d
	hk.closed = true
	if d != nil {
		d.cond.Broadcast()
	}
	hk.Mu.Unlock()
	if d == nil {
		return
	}
	d.cancel()
	d.wg.Wait()
	d.closeIdle()
}

func (hk *Hooks) scheduler() {
	defer hk.d.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		hk.Mu.Lock()
		leading := hk.Leading
		hk.Mu.Unlock()
		if hk.Share != nil && leading {
			// The deliveries other replicas made, and their endpoint
			// changes, reach the sender within followEvery (a tick would
			// take a second); what cannot be read now waits for the next.
			hk.CatchUp(hk.d.ctx, false)
			// And the outcomes of its attempts are written as soon: a
			// sender that dies sends again only what it did in its last
			// followEvery. (A single process writes them with the next
			// change a request makes.) A lock not had at once is the
			// next look's, or the tick's.
			ctx, cancel := context.WithTimeout(hk.d.ctx, followEvery)
			hk.Sync(ctx)
			cancel()
		}
		hk.Mu.Lock()
		now := time.Now()
		next := hk.AdvanceLocked(now)
		if len(hk.Ready) > 0 {
			hk.d.cond.Broadcast()
		}
		hk.Mu.Unlock()
		wait := time.Hour
		if next != 0 {
			wait = time.Duration(next - now.UnixNano())
		}
		if hk.Share != nil && leading {
			wait = min(wait, followEvery)
		}
		t.Reset(wait)
		select {
		case <-hk.d.ctx.Done():
			return
		case <-hk.wake:
		case <-t.C:
		}
	}
}

func (hk *Hooks) worker() {
	defer hk.d.wg.Done()
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	for {
		j := hk.TakeLocked(time.Now())
		for j == nil && !hk.closed { // none ready, or (shared) this replica no longer sends
			hk.d.cond.Wait()
			j = hk.TakeLocked(time.Now())
		}
		if hk.closed {
			return
		}
		ctx, cancel := hk.attemptsCtxLocked(j.D.EndpointID), context.CancelFunc(func() {})
		if hk.Share != nil {
			// Over before the lease could run out, should it not be
			// renewed: never two replicas sending one delivery.
			ctx, cancel = context.WithDeadline(ctx, hk.SendUntil.Add(leaseMargin-time.Second))
		}
		hk.Mu.Unlock()
		r := egress.Post(ctx, hk.d.client, j.URL, j.Header, j.D.Ev.Body)
		cancel()
		hk.Mu.Lock()
		hk.FinishLocked(j, r)
	}
}

// attemptsCtxLocked returns the context for an attempt to the endpoint of
// id: the dispatcher's, cancelled too when the endpoint is deleted
// (removeEndpointLocked). hk.Mu must be held.
func (hk *Hooks) attemptsCtxLocked(id string) context.Context {
	e := hk.Endpoints[id]
	if e == nil { // takeLocked returns only jobs of endpoints that exist
		return hk.d.ctx
	}
	if e.attempts == nil {
		e.attempts, e.cancelAttempts = context.WithCancel(hk.d.ctx)
	}
	return e.attempts
}

// advanceLocked moves the deliveries due at now from the timer heap to the
// ready list, or parks them on their endpoint when it is at its in-flight
// limit; those their endpoint refuses (refusesLocked) are failed. It
// returns when the next delivery falls due, in unix nanoseconds, or 0
// when none is scheduled. A follower of a shared state sends nothing: it
// returns 0. hk.Mu must be held.
func (hk *Hooks) AdvanceLocked(now time.Time) (next int64) {
	if !hk.sendingLocked(now) {
		return 0
	}
	n := now.UnixNano()
	for len(hk.Sched) > 0 && hk.Sched[0].NextAt <= n {
		d := heap.Pop(&hk.Sched).(*Delivery)
		e := hk.Endpoints[d.EndpointID]
		if e == nil {
			continue
		}
		switch why := e.refusalLocked(d); {
		case why != "":
			hk.EndLocked(e, d, StatusFailed, why)
			hk.trimLogLocked(e)
		case e.Inflight >= PerEndpointInFlight:
			e.Waiting = append(e.Waiting, d)
		default:
			e.Inflight++
			hk.Ready = append(hk.Ready, d)
		}
	}
	if len(hk.Sched) > 0 {
		return hk.Sched[0].NextAt
	}
	return 0
}

// refusesLocked reports whether e takes no attempt of its delivery d (only
// enabled endpoints subscribed to the type receive it). A
// delivery asked for explicitly, by the test call or a manual retry, goes
// once whatever e's events, and even if e is disabled; its retries then
// need e enabled. Any other needs e enabled and subscribed to its type.
//
// Disabling an endpoint or dropping a type fails the deliveries queued
// for it at once (dropQueuedLocked), and a failed attempt e now refuses is
// not retried (recordLocked); this catches what a restart brings back: an
// attempt under way at the change, which the shutdown or a crash left
// pending. hk.Mu must be held.
func (e *Endpoint) RefusesLocked(d *Delivery) bool { return e.refusalLocked(d) != "" }

// Why a delivery failed, as its log shows it (failure_reason).
const (
	ReasonRetriesUsedUp = "no attempt succeeded and the retries are used up"
	ReasonDisabled      = "the endpoint is disabled"
	ReasonUnsubscribed  = "the endpoint no longer takes this event type"
)

// refusalLocked is why e refuses d (refusesLocked), or "". hk.Mu must be
// held.
func (e *Endpoint) refusalLocked(d *Delivery) string { return e.refusal(d, d.Ev.Type) }

// refusal is why e refuses d, of an event of type typ, or "".
func (e *Endpoint) refusal(d *Delivery, typ string) string {
	switch {
	case d.Explicit && (e.Enabled || d.WhileDisabled && len(d.Attempts) == 0):
		return ""
	case !e.Enabled:
		return ReasonDisabled
	case !d.Explicit && !e.subscribed(typ):
		return ReasonUnsubscribed
	}
	return ""
}

// job is one attempt of a delivery, signed and ready to send.
type job struct {
	D      *Delivery
	e      *Endpoint // d's, whose place the job holds
	term   uint64    // hooks.term when it was taken
	URL    string
	Header http.Header
	a      Attempt // filled in when the attempt is made
}

// takeLocked removes the first ready delivery and signs its attempt at
// now. It returns nil when none is ready. The caller owes a finishLocked
// for every job. hk.Mu must be held.
func (hk *Hooks) TakeLocked(now time.Time) *job {
	if !hk.sendingLocked(now) {
		return nil
	}
	for len(hk.Ready) > 0 {
		d := hk.Ready[0]
		hk.Ready[0] = nil
		hk.Ready = hk.Ready[1:]
		e := hk.Endpoints[d.EndpointID]
		if e == nil { // deleted while queued
			continue
		}
		cur, old := e.secrets(now)
		sig := SignDelivery(cur, old, d.Ev.ID, now.Unix(), d.Ev.Body)
		j := &job{D: d, e: e, term: hk.term, URL: e.URL, Header: DeliveryHeader(sig),
			a: Attempt{At: now.UnixNano(), URL: e.URL, Timestamp: now.Unix(), Signature: sig.Signature, StdSignature: sig.StdSignature}}
		d.job = j
		return j
	}
	return nil
}

// finishLocked records the outcome r of j: it frees j's place on its
// endpoint and decides what comes next for the delivery. An attempt
// abandoned (context.Canceled: the service stopping, or the endpoint
// deleted) is not recorded: the delivery is scheduled again, due
// at once, so that whatever cancelled it, it is neither lost nor left
// pending in no queue. After a stop nothing runs the schedule, and the
// state saved holds it pending, due at once. hk.Mu must be held.
func (hk *Hooks) FinishLocked(j *job, r egress.Result) {
	d := j.D
	if d.job == j {
		d.job = nil
	}
	e := hk.Endpoints[d.EndpointID]
	if e == nil || e != j.e { // deleted, or the copy read again (feed.go): its places went with it
		return
	}
	hk.releaseLocked(e)
	if hk.Deliv[d.ID] != d { // trimmed or deleted meanwhile (shared: by the leader)
		return
	}
	if j.term != hk.term || !hk.sendingLocked(time.Now()) {
		// Taken by a leadership since ended, or past its lease
		// (lease.go): the next leader owns d; here it waits in the
		// schedule, as pending deliveries do in a follower.
		if d.Status == StatusPending && !hk.queuedLocked(e, d) {
			d.NextAt = time.Now().UnixNano()
			hk.scheduleLocked(d)
		}
		return
	}
	if errors.Is(r.Err, context.Canceled) {
		d.NextAt = time.Now().UnixNano()
		hk.scheduleLocked(d)
		return
	}
	hk.recordLocked(e, d, j.a.Complete(r))
}

// queuedLocked reports whether d, of e, waits anywhere to be sent or is
// under way. hk.Mu must be held.
func (hk *Hooks) queuedLocked(e *Endpoint, d *Delivery) bool {
	return d.Index >= 0 || d.job != nil || slices.Contains(hk.Ready, d) || slices.Contains(e.Waiting, d)
}

// dropQueuedLocked ends the deliveries of e that drop picks among those
// not under way (scheduled, waiting on e, or ready for a worker): each is
// failed at once, without an attempt. It stays in the log, and a manual
// retry sends its event again. Attempts under way finish and are
// recorded, and take no retry if e refuses them (recordLocked).
//
// Only enabled endpoints subscribed to the type receive it:
// the request that disables e drops everything queued for it (dropAll),
// and one that changes e's events drops what e now refuses, both in the
// same step as the change, so that no request e no longer takes starts
// after that answer. A follower of a shared state leaves this to the
// leader, which does it when it takes the change in (share.go).
// hk.Mu must be held.
func (hk *Hooks) DropQueuedLocked(e *Endpoint, drop func(*Delivery) bool) {
	if !hk.Leading {
		return
	}
	fail := func(d *Delivery) {
		// Dropped because e refuses it now, or (dropAll) because e was
		// disabled, which e also refuses for a test call not yet attempted.
		hk.EndLocked(e, d, StatusFailed, cmp.Or(e.refusalLocked(d), ReasonDisabled))
	}
	for _, d := range e.Log {
		if d.Index >= 0 && drop(d) {
			hk.Sched.Remove(d)
			fail(d)
		}
	}
	e.Waiting = slices.DeleteFunc(e.Waiting, func(d *Delivery) bool {
		if !drop(d) {
			return false
		}
		fail(d)
		return true
	})
	freed := 0 // a ready delivery holds one of e's places
	hk.Ready = slices.DeleteFunc(hk.Ready, func(d *Delivery) bool {
		if d.EndpointID != e.ID || !drop(d) {
			return false
		}
		fail(d)
		freed++
		return true
	})
	for range freed {
		hk.releaseLocked(e) // the next delivery waiting on e, if any, takes the place
	}
	hk.trimLogLocked(e) // after the loops over e.log, which trimming changes
}

// dropAll is dropQueuedLocked's choice when an endpoint is disabled.
func DropAll(*Delivery) bool { return true }

// releaseLocked frees one of e's places for attempts under way: the next
// delivery waiting on e, if any, takes it and becomes ready. hk.Mu must
// be held.
func (hk *Hooks) releaseLocked(e *Endpoint) {
	e.Inflight--
	if len(e.Waiting) == 0 {
		return
	}
	next := e.Waiting[0]
	e.Waiting = e.Waiting[1:]
	e.Inflight++
	hk.Ready = append(hk.Ready, next)
	if hk.d != nil {
		hk.d.cond.Signal()
	}
}

// tick does the timed housekeeping: expired idempotency keys and rotation
// secrets go (the store forgets the keys by their own expiry), endpoints
// failing for webhooks.disable_after are disabled (on hooks.now, as their
// failure windows are kept), and what changed is written. With replicas
// sharing the state (share.go), the leader does it, under their lock,
// and renews its lease; a follower takes in the others' changes, and
// takes the lead if it is free. One caller at a time.
func (hk *Hooks) Tick(now time.Time) error {
	if hk.Share == nil {
		hk.housekeep(now, true)
		return hk.Persist(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockWork)
	defer cancel()
	if !hk.NoLead {
		hk.Lead(ctx, now)
	}
	hk.Mu.Lock()
	leading := hk.Leading
	hk.Mu.Unlock()
	if !leading {
		hk.housekeep(now, false)
		return hk.Fresh(ctx)
	}
	work, unlock, err := hk.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	hk.housekeep(now, true)
	return errors.Join(hk.Persist(work), hk.TrimFeed(work, now))
}

// housekeep is tick's work on the copy. A follower (not leading) only
// forgets the expired keys: the leader writes what expires, and the
// store forgets the keys by itself.
func (hk *Hooks) housekeep(now time.Time, leading bool) {
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	// The keys that expired, from the front of the queue: O(those), not
	// O(every key remembered), under the lock every webhook call takes.
	n := 0
	for _, q := range hk.IdemQueue {
		if now.Unix() < q.Expires {
			break
		}
		n++
		if v, ok := hk.Idem[q.Key]; ok && v.Expires == q.Expires { // not published again since
			delete(hk.Idem, q.Key)
			store, _, _ := strings.Cut(q.Key, "\x00")
			hk.IdemCount[store]--
			if leading {
				hk.TouchLocked(kindIdem, q.Key)
			}
		}
	}
	clear(hk.IdemQueue[:n])
	hk.IdemQueue = hk.IdemQueue[n:]
	if !leading {
		return
	}
	clock := hk.Now()
	for _, e := range hk.Endpoints {
		if e.OldSecret != "" && now.Unix() >= e.OldSecretEnd {
			e.OldSecret, e.OldSecretEnd = "", 0
			hk.TouchLocked(KindEndpoint, e.ID)
		}
		hk.checkFailingLocked(e, clock)
	}
}
