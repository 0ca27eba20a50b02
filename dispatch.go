package main

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
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
	perEndpointInFlight = 4
	minDispatchWorkers  = 32
	maxDispatchWorkers  = egress.MaxInFlight // about 8 MiB of idle goroutines
)

// dispatchWorkers is the size of the pool for a configuration of stores
// stores (each up to maxEndpointsPerStore endpoints), within
// [minDispatchWorkers, maxDispatchWorkers]. Past 51 stores the bound no
// longer holds for every endpoint at once: 256 endpoints, all slow at
// their limit, would take every worker.
func dispatchWorkers(stores int) int {
	return min(maxDispatchWorkers, max(minDispatchWorkers, stores*maxEndpointsPerStore*perEndpointInFlight+1))
}

// timerHeap orders pending deliveries by their next attempt.
type timerHeap []*delivery

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].NextAt < h[j].NextAt }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)        { d := x.(*delivery); d.index = len(*h); *h = append(*h, d) }
func (h *timerHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.index = -1
	return d
}
func (h *timerHeap) remove(d *delivery) { heap.Remove(h, d.index) }

// dispatcher is the running side of hooks in the native build: its
// goroutines and HTTP client. (The wasm build has none: its host takes the
// jobs and makes the requests.)
type dispatcher struct {
	client *http.Client
	ctx    context.Context // cancelled by stop: attempts under way are abandoned and stay pending
	cancel context.CancelFunc
	cond   *sync.Cond // on hooks.mu; signalled when ready grows
	wg     sync.WaitGroup
}

// scheduleLocked puts the pending d in the timer heap. hk.mu must be held.
func (hk *hooks) scheduleLocked(d *delivery) {
	heap.Push(&hk.sched, d)
	if d.index == 0 {
		hk.pokeLocked()
	}
}

// pokeLocked tells whoever drives the dispatcher to look again now: the
// scheduler goroutine, or the edge host through the wake export. hk.mu
// must be held.
func (hk *hooks) pokeLocked() {
	select {
	case hk.wake <- struct{}{}:
	default:
	}
}

// start launches the scheduler and the workers.
func (hk *hooks) start() error {
	w := hk.cfg.Webhooks
	workers := dispatchWorkers(len(hk.cfg.Stores))
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
	d := &dispatcher{client: client, ctx: ctx, cancel: cancel, cond: sync.NewCond(&hk.mu)}
	hk.mu.Lock()
	hk.d = d
	hk.mu.Unlock()
	d.wg.Add(1 + workers)
	go hk.scheduler()
	for range workers {
		go hk.worker()
	}
	return nil
}

// stop ends the goroutines. Attempts under way are cancelled and their
// deliveries stay pending, due at once, to be sent after a restart.
func (hk *hooks) stop() {
	hk.mu.Lock()
	d := hk.d
	hk.closed = true
	if d != nil {
		d.cond.Broadcast()
	}
	hk.mu.Unlock()
	if d == nil {
		return
	}
	d.cancel()
	d.wg.Wait()
	d.client.CloseIdleConnections()
}

func (hk *hooks) scheduler() {
	defer hk.d.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		hk.mu.Lock()
		leading := hk.leading
		hk.mu.Unlock()
		if hk.share != nil && leading {
			// The deliveries other replicas made, and their endpoint
			// changes, reach the sender within followEvery (a tick would
			// take a second); what cannot be read now waits for the next.
			hk.catchUp(hk.d.ctx, false)
		}
		hk.mu.Lock()
		now := time.Now()
		next := hk.advanceLocked(now)
		if len(hk.ready) > 0 {
			hk.d.cond.Broadcast()
		}
		hk.mu.Unlock()
		wait := time.Hour
		if next != 0 {
			wait = time.Duration(next - now.UnixNano())
		}
		if hk.share != nil && leading {
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

func (hk *hooks) worker() {
	defer hk.d.wg.Done()
	hk.mu.Lock()
	defer hk.mu.Unlock()
	for {
		j := hk.takeLocked(time.Now())
		for j == nil && !hk.closed { // none ready, or (shared) this replica no longer sends
			hk.d.cond.Wait()
			j = hk.takeLocked(time.Now())
		}
		if hk.closed {
			return
		}
		ctx, cancel := hk.attemptsCtxLocked(j.d.EndpointID), context.CancelFunc(func() {})
		if hk.share != nil {
			// Over before the lease could run out, should it not be
			// renewed: never two replicas sending one delivery.
			ctx, cancel = context.WithDeadline(ctx, hk.sendUntil.Add(leaseMargin-time.Second))
		}
		hk.mu.Unlock()
		r := egress.Post(ctx, hk.d.client, j.url, j.header, j.d.ev.Body)
		cancel()
		hk.mu.Lock()
		hk.finishLocked(j, r)
	}
}

// attemptsCtxLocked returns the context for an attempt to the endpoint of
// id: the dispatcher's, cancelled too when the endpoint is deleted
// (removeEndpointLocked). hk.mu must be held.
func (hk *hooks) attemptsCtxLocked(id string) context.Context {
	e := hk.endpoints[id]
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
// returns 0. hk.mu must be held.
func (hk *hooks) advanceLocked(now time.Time) (next int64) {
	if !hk.sendingLocked(now) {
		return 0
	}
	n := now.UnixNano()
	for len(hk.sched) > 0 && hk.sched[0].NextAt <= n {
		d := heap.Pop(&hk.sched).(*delivery)
		e := hk.endpoints[d.EndpointID]
		if e == nil {
			continue
		}
		switch why := e.refusalLocked(d); {
		case why != "":
			hk.endLocked(e, d, statusFailed, why)
			hk.trimLogLocked(e)
		case e.inflight >= perEndpointInFlight:
			e.waiting = append(e.waiting, d)
		default:
			e.inflight++
			hk.ready = append(hk.ready, d)
		}
	}
	if len(hk.sched) > 0 {
		return hk.sched[0].NextAt
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
// pending. hk.mu must be held.
func (e *endpoint) refusesLocked(d *delivery) bool { return e.refusalLocked(d) != "" }

// Why a delivery failed, as its log shows it (failure_reason).
const (
	reasonRetriesUsedUp = "no attempt succeeded and the retries are used up"
	reasonDisabled      = "the endpoint is disabled"
	reasonUnsubscribed  = "the endpoint no longer takes this event type"
)

// refusalLocked is why e refuses d (refusesLocked), or "". hk.mu must be
// held.
func (e *endpoint) refusalLocked(d *delivery) string {
	switch {
	case d.Explicit && (e.Enabled || len(d.Attempts) == 0):
		return ""
	case !e.Enabled:
		return reasonDisabled
	case !d.Explicit && !e.subscribed(d.ev.Type):
		return reasonUnsubscribed
	}
	return ""
}

// job is one attempt of a delivery, signed and ready to send.
type job struct {
	d      *delivery
	e      *endpoint // d's, whose place the job holds
	term   uint64    // hooks.term when it was taken
	url    string
	header http.Header
	a      attempt // filled in when the attempt is made
}

// takeLocked removes the first ready delivery and signs its attempt at
// now. It returns nil when none is ready. The caller owes a finishLocked
// for every job. hk.mu must be held.
func (hk *hooks) takeLocked(now time.Time) *job {
	if !hk.sendingLocked(now) {
		return nil
	}
	for len(hk.ready) > 0 {
		d := hk.ready[0]
		hk.ready[0] = nil
		hk.ready = hk.ready[1:]
		e := hk.endpoints[d.EndpointID]
		if e == nil { // deleted while queued
			continue
		}
		cur, old := e.secrets(now)
		sig := signDelivery(cur, old, d.ev.ID, now.Unix(), d.ev.Body)
		j := &job{d: d, e: e, term: hk.term, url: e.URL, header: deliveryHeader(sig),
			a: attempt{At: now.UnixNano(), URL: e.URL, Timestamp: now.Unix(), Signature: sig.Signature, StdSignature: sig.StdSignature}}
		d.job = j
		return j
	}
	return nil
}

// finishLocked records the outcome r of j: it frees j's place on its
// endpoint and decides what comes next for the delivery. An attempt
// abandoned (context.Canceled: the service stopping, or the edge host
// cancelling a job) is not recorded: the delivery is scheduled again, due
// at once, so that whatever cancelled it, it is neither lost nor left
// pending in no queue. After a stop nothing runs the schedule, and the
// state saved holds it pending, due at once. hk.mu must be held.
func (hk *hooks) finishLocked(j *job, r egress.Result) {
	d := j.d
	if d.job == j {
		d.job = nil
	}
	e := hk.endpoints[d.EndpointID]
	if e == nil || e != j.e { // deleted, or the copy read again (hookfeed.go): its places went with it
		return
	}
	hk.releaseLocked(e)
	if hk.deliv[d.ID] != d { // trimmed or deleted meanwhile (shared: by the leader)
		return
	}
	if j.term != hk.term || !hk.sendingLocked(time.Now()) {
		// Taken by a leadership since ended, or past its lease
		// (hooklease.go): the next leader owns d; here it waits in the
		// schedule, as pending deliveries do in a follower.
		if d.Status == statusPending && !hk.queuedLocked(e, d) {
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
	hk.recordLocked(e, d, j.a.complete(r))
}

// queuedLocked reports whether d, of e, waits anywhere to be sent or is
// under way. hk.mu must be held.
func (hk *hooks) queuedLocked(e *endpoint, d *delivery) bool {
	return d.index >= 0 || d.job != nil || slices.Contains(hk.ready, d) || slices.Contains(e.waiting, d)
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
// leader, which does it when it takes the change in (hookshare.go).
// hk.mu must be held.
func (hk *hooks) dropQueuedLocked(e *endpoint, drop func(*delivery) bool) {
	if !hk.leading {
		return
	}
	fail := func(d *delivery) {
		// Dropped because e refuses it now, or (dropAll) because e was
		// disabled, which e also refuses for a test call not yet attempted.
		hk.endLocked(e, d, statusFailed, cmp.Or(e.refusalLocked(d), reasonDisabled))
	}
	for _, d := range e.log {
		if d.index >= 0 && drop(d) {
			hk.sched.remove(d)
			fail(d)
		}
	}
	e.waiting = slices.DeleteFunc(e.waiting, func(d *delivery) bool {
		if !drop(d) {
			return false
		}
		fail(d)
		return true
	})
	freed := 0 // a ready delivery holds one of e's places
	hk.ready = slices.DeleteFunc(hk.ready, func(d *delivery) bool {
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
func dropAll(*delivery) bool { return true }

// releaseLocked frees one of e's places for attempts under way: the next
// delivery waiting on e, if any, takes it and becomes ready. hk.mu must
// be held.
func (hk *hooks) releaseLocked(e *endpoint) {
	e.inflight--
	if len(e.waiting) == 0 {
		return
	}
	next := e.waiting[0]
	e.waiting = e.waiting[1:]
	e.inflight++
	hk.ready = append(hk.ready, next)
	if hk.d != nil {
		hk.d.cond.Signal()
	} else {
		hk.pokeLocked() // the edge host takes ready jobs when it ticks
	}
}

// complete fills in a from the outcome of its request.
func (a attempt) complete(r egress.Result) attempt {
	a.DurationMS = r.Duration.Milliseconds()
	a.Status = r.Status
	a.ResponseBody = string(r.Body)
	switch {
	case r.Err != nil && r.Status == 0 && r.Timeout:
		a.Error = "timed out: " + errText(r.Err)
	case r.Err != nil && r.Status == 0:
		a.Error = errText(r.Err)
	case r.Err != nil:
		a.Error = "reading the response: " + errText(r.Err)
	case r.Status == http.StatusOK:
	case r.Status >= 200 && r.Status < 300:
		a.Error = fmt.Sprintf("answer 200: only HTTP 200 counts as success, %d does not", r.Status)
	case r.Status >= 300 && r.Status < 400:
		a.Error = "redirects are not followed: answer 200 at the configured URL"
	default:
		a.Error = fmt.Sprintf("the receiver answered %d", r.Status)
	}
	return a
}

// errText is err's message as the delivery log shows it to the merchant:
// Go's, but for a failed lookup's resolver address, which is the
// service's own network's business.
func errText(err error) string {
	var dns *net.DNSError
	if !errors.As(err, &dns) || dns.Server == "" {
		return err.Error()
	}
	bare := *dns
	bare.Server = ""
	return strings.Replace(err.Error(), dns.Error(), bare.Error(), 1)
}

// recordLocked adds a to d, logged on e, moves e's failure window on
// (failing.go), and decides what comes next:
// done on 200 with its body read, failed after the last scheduled retry
// or when e refuses d now (refusesLocked), otherwise the next
// attempt after the scheduled wait with up to 10 % jitter (a receiver's
// Retry-After moves nothing: the schedule is the one docs/api.md
// promises). hk.mu must be held.
func (hk *hooks) recordLocked(e *endpoint, d *delivery, a attempt) {
	d.Attempts = append(d.Attempts, a)
	hk.pending[e.StoreID] += attemptCost(&a) // d is pending still: endLocked takes its whole logCost back
	hk.touchLocked(kindDelivery, d.ID)
	sched := hk.cfg.Webhooks.RetrySchedule
	n := len(d.Attempts)
	ok := a.Status == http.StatusOK && a.Error == "" // not a 200 whose body then timed out
	hk.noteAttemptLocked(e, ok)                      // which may disable e: d is then refused too
	switch why := e.refusalLocked(d); {
	case ok:
		hk.endLocked(e, d, statusSucceeded, "")
		hk.outcomes.succeeded.Add(1)
	case n > len(sched):
		hk.endLocked(e, d, statusFailed, reasonRetriesUsedUp)
		hk.outcomes.failed.Add(1)
	case why != "":
		hk.endLocked(e, d, statusFailed, why)
		hk.outcomes.failed.Add(1)
	default:
		hk.outcomes.retried.Add(1)
		wait := sched[n-1].D()
		wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		d.NextAt = time.Now().Add(wait).UnixNano()
		hk.scheduleLocked(d)
	}
	hk.trimLogLocked(e) // if d ended, the log holds one more finished delivery
}

var userAgent = "deeplink-webhooks/" + productVersion()

// deliveryHeader is the whole header of an attempt: its signatures, and
// the rest, which is the same for every request.
func deliveryHeader(sig webhookHeaders) http.Header {
	h := http.Header{"Content-Type": jsonContentType, "User-Agent": {userAgent}}
	sig.apply(h)
	return h
}

// signatures are the signature headers attempt a sent for event eventID,
// rebuilt for the delivery log from what the attempt keeps.
func (a attempt) signatures(eventID string) webhookHeaders {
	return webhookHeaders{Signature: a.Signature, ID: eventID, Timestamp: strconv.FormatInt(a.Timestamp, 10), StdSignature: a.StdSignature}
}

// tick does the timed housekeeping: expired idempotency keys and rotation
// secrets go (the store forgets the keys by their own expiry), endpoints
// failing for webhooks.disable_after are disabled (on hooks.now, as their
// failure windows are kept), and what changed is written. With replicas
// sharing the state (hookshare.go), the leader does it, under their lock,
// and renews its lease; a follower takes in the others' changes, and
// takes the lead if it is free. One caller at a time.
func (hk *hooks) tick(now time.Time) error {
	if hk.share == nil {
		hk.housekeep(now, true)
		return hk.persist(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockWork)
	defer cancel()
	hk.lead(ctx, now)
	hk.mu.Lock()
	leading := hk.leading
	hk.mu.Unlock()
	if !leading {
		hk.housekeep(now, false)
		return hk.fresh(ctx)
	}
	work, unlock, err := hk.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	hk.housekeep(now, true)
	return errors.Join(hk.persist(work), hk.trimFeed(work, now))
}

// housekeep is tick's work on the copy. A follower (not leading) only
// forgets the expired keys: the leader writes what expires, and the
// store forgets the keys by itself.
func (hk *hooks) housekeep(now time.Time, leading bool) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	// The keys that expired, from the front of the queue: O(those), not
	// O(every key remembered), under the lock every webhook call takes.
	n := 0
	for _, q := range hk.idemQueue {
		if now.Unix() < q.expires {
			break
		}
		n++
		if v, ok := hk.idem[q.key]; ok && v.Expires == q.expires { // not published again since
			delete(hk.idem, q.key)
			store, _, _ := strings.Cut(q.key, "\x00")
			hk.idemCount[store]--
			if leading {
				hk.touchLocked(kindIdem, q.key)
			}
		}
	}
	clear(hk.idemQueue[:n])
	hk.idemQueue = hk.idemQueue[n:]
	if !leading {
		return
	}
	clock := hk.now()
	for _, e := range hk.endpoints {
		if e.OldSecret != "" && now.Unix() >= e.OldSecretEnd {
			e.OldSecret, e.OldSecretEnd = "", 0
			hk.touchLocked(kindEndpoint, e.ID)
		}
		hk.checkFailingLocked(e, clock)
	}
}
