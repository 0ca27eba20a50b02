package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/store"
)

// Several replicas on one shared store (Redis, API.md §9) each keep a
// working copy of the webhook state (hooks), and keep it the same as the
// others' through the store:
//
//   - Every change is made under the store's webhook lock, on a copy that
//     has first caught up with the others' changes, and is written before
//     the lock is let go: changes are made one at a time, each on the
//     state every change before it left.
//   - Each write (persist) is also listed in the change feed, a sorted
//     set of the records it wrote scored by a counter; a replica catches
//     up by reading the entries past the last it took in, and the
//     records they name. Reads catch up first too, so that a change answered by one
//     replica is seen by the next request to any.
//   - One replica at a time, the leader, holding a lease, sends the
//     deliveries, and it alone changes deliveries once made (attempts,
//     their end, trimming the log): it takes in only the deliveries it
//     does not have, and applies the consequences of the others' endpoint
//     changes itself (a disabled endpoint's queue failed). The others
//     make deliveries (publish, test, retry) and change endpoints. A
//     leader that dies leaves its lease to expire; another takes it over
//     and sends what is pending, from the last written state.
//
// A single process (the embedded store) shares nothing: hooks.share is
// nil and the copy is the state, written through.
const (
	shareLock  = "hooks:lock"  // the webhook lock: a holder's token, expiring
	shareLead  = "hooks:lead"  // the leader's lease: its name, expiring
	shareGen   = "hooks:gen"   // the change feed's counter
	shareEpoch = "hooks:epoch" // a random name of the feed, made again when the store lost it
	shareFeed  = "hooks:feed"  // the change feed: the records each write wrote, by the counter (feedMember)
	shareFloor = "hooks:floor" // the counter below which feed entries were dropped

	// lockTTL is how long the lock outlives a holder that died holding
	// it; a holder gives its work up after lockWork, well before, so
	// that two never hold it at once.
	lockTTL  = 15 * time.Second
	lockWork = 5 * time.Second
	// The lead outlives a leader that died by webhooks.timeout and
	// leaseExtra (at least leaseMin): longer than an attempt. The others
	// take its deliveries over within that and a tick, well within the
	// webhooks.timeout + 30 s of API.md §9. The leader renews it at
	// every tick (each second) and, when renewing fails, stops sending
	// (its attempts under way cancelled) leaseMargin before it runs out.
	leaseMin    = 10 * time.Second
	leaseExtra  = 5 * time.Second
	leaseMargin = 3 * time.Second
	// feedKeep is how long feed entries are kept: a replica that took in
	// none for longer (Redis unreachable from it) reads the whole state
	// again, as a start does. A replica takes them in at least every
	// second (tick); what is kept is about a minute of writes.
	feedKeep = time.Minute
	feedTrim = 10 * time.Second // how often the leader drops what is older

)

// sharing is a replica's part in the shared webhook state.
type sharing struct {
	st   store.Store
	name string        // this process in the lock and the lease: host, pid and a random part
	n    atomic.Uint64 // lock tokens made

	// The store's lock is held for the process: changes that come while
	// it is held, for up to lockJoin after it was taken, make theirs
	// under it too (their writes shared, as a single process's are), and
	// the last to finish lets it go. So a busy replica takes the lock
	// once for many changes, and the others wait at most lockJoin and
	// the changes under way.
	mu      sync.Mutex // guards the fields below
	taking  bool       // a change is taking the lock
	held    bool       // the lock is this process's
	holders int        // changes under way under it
	since   time.Time  // when it was taken
	token   []byte     // its holder's token in the store
	work    context.Context
	stop    context.CancelFunc // ends work
	turn    chan struct{}      // closed when taking, held or holders change

	// Guarded by hooks.persistMu: one catch-up or persist at a time.
	seen  int64  // the last feed entry this copy has taken in
	epoch string // the feed's name when it did

	// Only tick uses these, one caller at a time.
	leaseEnd time.Time  // when the lease held runs out, at the latest
	marks    []feedMark // the counter every feedTrim, for trimming the feed
	trimmed  time.Time  // the last trim
}

// feedMark is the counter at a time.
type feedMark struct {
	at  time.Time
	gen int64
}

func newSharing(st store.Store) *sharing {
	host, _ := os.Hostname()
	return &sharing{st: st, turn: make(chan struct{}),
		name: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), strings.ToLower(rand.Text()[:8]))}
}

// shareWith makes hk a replica of the state shared in st, a follower
// until its tick takes the lead. It is called before loadStore: what
// is written after the counter is read is taken in by the first catchUp.
func (hk *hooks) shareWith(ctx context.Context, st store.Store) error {
	sh := newSharing(st)
	epoch, err := sh.readEpoch(ctx)
	if err != nil {
		return err
	}
	gen, err := counter(ctx, st, shareGen)
	if err != nil {
		return err
	}
	sh.seen, sh.epoch = gen, epoch
	hk.share, hk.leading = sh, false
	return nil
}

// readEpoch returns the feed's name, naming it first if the store has
// none (the first replica's start, or a store that lost its data): a
// replica that finds another name than the one it knew reads the whole
// state again, since the counter alone may have come back to where it
// was.
func (sh *sharing) readEpoch(ctx context.Context) (string, error) {
	b, err := sh.st.Get(ctx, shareEpoch)
	if errors.Is(err, store.ErrNotFound) {
		err = sh.st.Insert(ctx, shareEpoch, []byte(rand.Text()), time.Time{})
		if err == nil || errors.Is(err, store.ErrExists) {
			b, err = sh.st.Get(ctx, shareEpoch)
		}
	}
	return string(b), err
}

// errLockBusy: the webhook lock was not free within the wait allowed.
var errLockBusy = fmt.Errorf("webhooks: the lock of the shared state stayed taken: %w", store.ErrUnavailable)

// lock takes the store's webhook lock for this process, or joins the
// changes made under it (sharing.mu), with the copy caught up. The
// caller makes its change, persists it with the context returned (it
// ends lockWork after the lock was taken) and calls unlock. ctx bounds
// the wait.
func (hk *hooks) lock(ctx context.Context) (context.Context, func(), error) {
	sh := hk.share
	for {
		sh.mu.Lock()
		switch {
		case sh.held && time.Since(sh.since) < lockJoin:
			sh.holders++
			work := sh.work
			sh.mu.Unlock()
			return work, sh.unlock, nil
		case !sh.held && !sh.taking:
			sh.taking = true
			sh.mu.Unlock()
			err := hk.take(ctx)
			sh.mu.Lock()
			sh.taking = false
			sh.next()
			if err != nil {
				sh.mu.Unlock()
				return nil, nil, err
			}
			work := sh.work
			sh.mu.Unlock()
			return work, sh.unlock, nil
		}
		turn := sh.turn
		sh.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			return nil, nil, errLockBusy
		}
	}
}

// lockJoin is how long after the lock was taken changes may still join
// its holder's.
const lockJoin = 50 * time.Millisecond

// take takes the store's lock and catches the copy up, for lock.
func (hk *hooks) take(ctx context.Context) error {
	sh := hk.share
	since := time.Now()
	work, stop := context.WithTimeout(context.WithoutCancel(ctx), lockWork)
	token := []byte(sh.name + "/" + strconv.FormatUint(sh.n.Add(1), 10))
	wait := time.Millisecond
	for {
		err := sh.st.Insert(work, shareLock, token, time.Now().Add(lockTTL))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrExists) {
			stop()
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-work.Done():
		case <-t.C:
			wait = min(2*wait, 20*time.Millisecond)
			continue
		}
		t.Stop()
		stop()
		return errLockBusy
	}
	sh.mu.Lock()
	sh.held, sh.holders, sh.since, sh.token, sh.work, sh.stop = true, 1, since, token, work, stop
	sh.mu.Unlock()
	if err := hk.catchUp(work); err != nil {
		sh.unlock()
		return err
	}
	return nil
}

// unlock ends a change made under the lock; the last lets the lock go.
func (sh *sharing) unlock() {
	sh.mu.Lock()
	sh.holders--
	if sh.holders > 0 {
		sh.mu.Unlock()
		return
	}
	token, stop := sh.token, sh.stop
	sh.mu.Unlock()
	// Letting go is best effort: should it fail, the lock expires.
	ctx, cancel := context.WithTimeout(context.Background(), lockWork)
	sh.st.CompareAndSwap(ctx, shareLock, token, nil, time.Time{})
	cancel()
	stop()
	sh.mu.Lock()
	sh.held = false
	sh.next()
	sh.mu.Unlock()
}

// next wakes the changes waiting for their turn. sh.mu must be held.
func (sh *sharing) next() {
	close(sh.turn)
	sh.turn = make(chan struct{})
}

// locked runs change under the lock (when shared) and persists what it
// changed.
func (hk *hooks) locked(ctx context.Context, change func()) error {
	if hk.share == nil {
		change()
		return hk.persist(ctx)
	}
	work, unlock, err := hk.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	change()
	return hk.persist(work)
}

// sync writes what the copy changed outside a request (the dispatcher's
// outcomes, what the leader did about the others' changes): under the
// lock when shared, and then only if there is something to write.
func (hk *hooks) sync(ctx context.Context) error {
	if hk.share == nil {
		return hk.persist(ctx)
	}
	hk.persistMu.Lock()
	done := hk.persistedGen
	hk.persistMu.Unlock()
	hk.mu.Lock()
	idle := hk.touchGen <= done
	hk.mu.Unlock()
	if idle && !hk.persistBad.Load() {
		return nil
	}
	return hk.locked(ctx, func() {})
}

// release gives the lead up, if this replica holds it, so that another
// takes it at its next tick rather than when it runs out: for a stop.
func (hk *hooks) release(ctx context.Context) {
	if hk.share == nil {
		return
	}
	hk.mu.Lock()
	leading := hk.leading
	hk.stepDownLocked()
	hk.mu.Unlock()
	if leading {
		name := []byte(hk.share.name)
		hk.share.st.CompareAndSwap(ctx, shareLead, name, nil, time.Time{})
	}
}

// feedMember is the feed's entry for the write gen of ops: a JSON list
// of the counter and each record's kind:id.
func feedMember(gen int64, ops []hookOp) string {
	names := make([]string, 0, 1+len(ops))
	names = append(names, strconv.FormatInt(gen, 10))
	for _, op := range ops {
		names = append(names, op.kind+":"+op.id)
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// feedEntry is a record the feed names, read for catchUp.
type feedEntry struct {
	kind, id string
	val      []byte // nil: deleted
}

// catchUp takes in the changes the other replicas wrote since the last
// call. With nothing shared it does nothing.
func (hk *hooks) catchUp(ctx context.Context) error {
	sh := hk.share
	if sh == nil {
		return nil
	}
	hk.persistMu.Lock()
	defer hk.persistMu.Unlock()
	epoch, err := sh.readEpoch(ctx)
	if err != nil {
		return err
	}
	gen, err := counter(ctx, sh.st, shareGen)
	if err != nil || gen == sh.seen && epoch == sh.epoch {
		return err
	}
	floor, err := counter(ctx, sh.st, shareFloor)
	if err != nil {
		return err
	}
	if epoch != sh.epoch || gen < sh.seen || sh.seen < floor {
		// Redis lost its data (restarted empty), or this copy missed
		// entries since dropped: read the whole state again.
		hk.log.Warn("webhooks: reading the shared webhook state again", "seen", sh.seen, "counter", gen, "floor", floor)
		if err := hk.reload(ctx, gen); err != nil {
			return err
		}
		sh.epoch = epoch
		return nil
	}
	list, err := sh.st.ZRange(ctx, shareFeed, sh.seen+1, math.MaxInt64, 0, false)
	if err != nil {
		return err
	}
	kinds := map[string]int{kindEndpoint: 0, kindEvent: 1, kindDelivery: 2, kindIdem: 3}
	var entries []feedEntry
	named := map[string]bool{}
	for _, m := range list {
		var names []string
		if json.Unmarshal([]byte(m.Member), &names) != nil || len(names) == 0 {
			continue
		}
		for _, name := range names[1:] { // names[0]: the counter, which makes the entry unique
			kind, id, _ := strings.Cut(name, ":")
			if _, ok := kinds[kind]; !ok || named[name] {
				continue
			}
			named[name] = true
			b, err := sh.st.Get(ctx, hookKey(kind, id))
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			entries = append(entries, feedEntry{kind, id, b})
		}
	}
	// Endpoints before the deliveries on them, events before theirs.
	slices.SortStableFunc(entries, func(a, b feedEntry) int { return cmp.Compare(kinds[a.kind], kinds[b.kind]) })
	evs, err := hk.eventsFor(ctx, entries)
	if err != nil {
		return err
	}
	hk.mu.Lock()
	hk.takeInLocked(entries, evs)
	hk.mu.Unlock()
	for _, e := range entries {
		hk.index(e.kind, e.id, e.val != nil)
	}
	for _, m := range list {
		sh.seen = max(sh.seen, m.Score)
	}
	return nil
}

// eventsFor reads the events of the new deliveries among entries that
// neither entries nor the copy holds (a retry on another replica of an
// event this copy has forgotten).
func (hk *hooks) eventsFor(ctx context.Context, entries []feedEntry) (map[string]*event, error) {
	evs := map[string]*event{}
	var want []string
	hk.mu.Lock()
	for _, e := range entries {
		switch {
		case e.val == nil:
		case e.kind == kindEvent:
			var ev event
			if json.Unmarshal(e.val, &ev) == nil {
				evs[ev.ID] = &ev
			}
		case e.kind == kindDelivery && hk.deliv[e.id] == nil:
			var d struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(e.val, &d) == nil && evs[d.EventID] == nil && hk.events[d.EventID] == nil {
				want = append(want, d.EventID)
			}
		}
	}
	hk.mu.Unlock()
	for _, id := range want {
		b, err := hk.share.st.Get(ctx, hookKey(kindEvent, id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var ev event
		if json.Unmarshal(b, &ev) == nil {
			evs[ev.ID] = &ev
		}
	}
	return evs, nil
}

// takeInLocked makes the copy hold entries, the records other replicas
// wrote. Taking them in writes nothing back: only what the leader does
// about them (consequences) is its own change, written at its next
// persist. hk.mu must be held.
func (hk *hooks) takeInLocked(entries []feedEntry, evs map[string]*event) {
	touched, gen := hk.touched, hk.touchGen
	hk.touched = nil
	var then []func()
	for _, en := range entries {
		if f := hk.takeInOneLocked(en, evs); f != nil {
			then = append(then, f)
		}
	}
	hk.touched, hk.touchGen = touched, gen
	for _, f := range then {
		f()
	}
}

// takeInOneLocked takes in one record, and returns what the leader does
// about it, or nil. hk.mu must be held.
func (hk *hooks) takeInOneLocked(en feedEntry, evs map[string]*event) func() {
	switch en.kind {
	case kindEndpoint:
		return hk.takeInEndpointLocked(en)
	case kindDelivery:
		return hk.takeInDeliveryLocked(en, evs)
	case kindIdem:
		store, _, _ := strings.Cut(en.id, "\x00")
		_, had := hk.idem[en.id]
		var m idem
		if en.val == nil || json.Unmarshal(en.val, &m) != nil {
			if had {
				delete(hk.idem, en.id)
				hk.idemCount[store]--
			}
			return nil
		}
		if !had {
			hk.idemCount[store]++
		}
		hk.idem[en.id] = m
		hk.idemQueue = append(hk.idemQueue, idemEntry{en.id, m.Expires})
	}
	return nil // events come with their deliveries
}

func (hk *hooks) takeInEndpointLocked(en feedEntry) func() {
	e := hk.endpoints[en.id]
	var ne endpoint
	if en.val == nil || json.Unmarshal(en.val, &ne) != nil {
		if e != nil {
			hk.removeEndpointLocked(e)
		}
		return nil
	}
	if e == nil {
		st := hk.cfg.Store(ne.StoreID)
		if st == nil {
			return nil // of a store this replica does not serve
		}
		ne.StoreID = st.ID
		hk.addEndpointLocked(&ne)
		return nil
	}
	wasEnabled, events := e.Enabled, e.Events
	e.URL, e.Description, e.Events, e.Enabled = ne.URL, ne.Description, ne.Events, ne.Enabled
	e.DisabledReason, e.FailingSince, e.UpdatedAt = ne.DisabledReason, ne.FailingSince, ne.UpdatedAt
	e.Secret, e.OldSecret, e.OldSecretEnd = ne.Secret, ne.OldSecret, ne.OldSecretEnd
	e.NextSeq = max(e.NextSeq, ne.NextSeq)
	if !hk.leading {
		return nil
	}
	switch {
	case wasEnabled && !e.Enabled:
		return func() { hk.dropQueuedLocked(e, dropAll) }
	case !slices.Equal(events, e.Events):
		return func() { hk.dropQueuedLocked(e, e.refusesLocked) }
	}
	return nil
}

func (hk *hooks) takeInDeliveryLocked(en feedEntry, evs map[string]*event) func() {
	d := hk.deliv[en.id]
	if d != nil && hk.leading {
		return nil // the leader is the one writer of the deliveries it has
	}
	var nd delivery
	if en.val == nil || json.Unmarshal(en.val, &nd) != nil {
		if d != nil {
			hk.dropDeliveryLocked(d)
		}
		return nil
	}
	e := hk.endpoints[nd.EndpointID]
	if e == nil {
		return nil
	}
	if d == nil {
		ev := cmp.Or(hk.events[nd.EventID], evs[nd.EventID])
		if ev == nil {
			return nil
		}
		d = &nd
		d.ev, d.index = ev, -1
		hk.referLocked(d)
		i, _ := slices.BinarySearchFunc(e.log, d.Seq, func(x *delivery, seq uint64) int { return cmp.Compare(x.Seq, seq) })
		e.log = slices.Insert(e.log, i, d)
		hk.accountLocked(e, d, 1)
		if hk.leading {
			return func() { hk.trimLogLocked(e) }
		}
		return nil
	}
	hk.accountLocked(e, d, -1)
	d.Status, d.NextAt, d.Attempts, d.Reason, d.Explicit = nd.Status, nd.NextAt, nd.Attempts, nd.Reason, nd.Explicit
	hk.accountLocked(e, d, 1)
	return nil
}

// accountLocked counts the delivery d of e in (sign 1) or out of (-1)
// the copy's budgets and schedule. hk.mu must be held.
func (hk *hooks) accountLocked(e *endpoint, d *delivery, sign int64) {
	if d.Status != statusPending {
		e.finished += int(sign)
		e.logBytes += sign * logCost(d)
		return
	}
	hk.pending[e.StoreID] += sign * logCost(d)
	switch {
	case sign > 0:
		hk.scheduleLocked(d)
	case d.index >= 0:
		hk.sched.remove(d)
	}
}

// dropDeliveryLocked removes d, which another replica deleted (trimmed
// from its log), from the copy. hk.mu must be held.
func (hk *hooks) dropDeliveryLocked(d *delivery) {
	if e := hk.endpoints[d.EndpointID]; e != nil {
		hk.accountLocked(e, d, -1)
		e.log = slices.DeleteFunc(e.log, func(x *delivery) bool { return x == d })
	}
	hk.forgetLocked(d)
}

// reload reads the whole shared state again, as a start does, the
// counter at gen. hk.persistMu must be held.
func (hk *hooks) reload(ctx context.Context, gen int64) error {
	hk.mu.Lock()
	hk.stepDownLocked()
	parked := hk.parked
	fresh := newHooks(hk.cfg)
	hk.endpoints, hk.byStore, hk.events, hk.deliv = fresh.endpoints, fresh.byStore, fresh.events, fresh.deliv
	hk.idem, hk.idemQueue, hk.pending, hk.idemCount = fresh.idem, nil, fresh.pending, fresh.idemCount
	hk.sched, hk.ready, hk.parked = nil, nil, hooksFile{}
	hk.mu.Unlock()
	hk.indexed = nil
	if err := hk.loadStore(ctx); err != nil {
		hk.mu.Lock()
		hk.parked = parked
		hk.mu.Unlock()
		return err
	}
	hk.share.seen = gen
	return nil
}

// counter reads the counter at key, 0 when there is none.
func counter(ctx context.Context, st store.Store, key string) (int64, error) {
	b, err := st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// lead renews the lease this replica holds, or takes it when free; a
// replica that cannot renew stops sending before it runs out. One caller
// at a time (tick).
func (hk *hooks) lead(ctx context.Context, now time.Time) {
	sh := hk.share
	lease := hk.leaseTTL()
	hk.mu.Lock()
	leading := hk.leading
	hk.mu.Unlock()
	name := []byte(sh.name)
	if leading {
		err := sh.st.CompareAndSwap(ctx, shareLead, name, name, now.Add(lease))
		switch {
		case err == nil:
			sh.leaseEnd = now.Add(lease)
		case errors.Is(err, store.ErrConflict) || now.After(sh.leaseEnd.Add(-leaseMargin)):
			hk.log.Warn("webhooks: no longer sending deliveries: another replica does", "lost", err)
			hk.mu.Lock()
			hk.stepDownLocked()
			hk.mu.Unlock()
		}
		return
	}
	if err := sh.st.Insert(ctx, shareLead, name, now.Add(lease)); err != nil {
		return // held by another, or the store unreachable
	}
	sh.leaseEnd = now.Add(lease)
	// Caught up before it sends, so that it sends what the last leader left.
	if err := hk.catchUp(ctx); err != nil {
		sh.st.CompareAndSwap(ctx, shareLead, name, nil, time.Time{})
		return
	}
	hk.log.Info("webhooks: this replica now sends the deliveries")
	hk.mu.Lock()
	hk.leading = true
	hk.pokeLocked()
	hk.mu.Unlock()
}

// leaseTTL is how long the lead lasts unless renewed.
func (hk *hooks) leaseTTL() time.Duration {
	return max(leaseMin, hk.cfg.Webhooks.Timeout.D()+leaseExtra)
}

// stepDownLocked stops sending: what is ready or waiting goes back to the
// schedule, and attempts under way are cancelled (they stay pending,
// for the next leader). hk.mu must be held.
func (hk *hooks) stepDownLocked() {
	if hk.share == nil || !hk.leading {
		return
	}
	hk.leading = false
	now := time.Now().UnixNano()
	for _, d := range hk.ready {
		if e := hk.endpoints[d.EndpointID]; e != nil {
			e.inflight--
		}
		d.NextAt = now
		hk.scheduleLocked(d)
	}
	hk.ready = nil
	for _, e := range hk.endpoints {
		for _, d := range e.waiting {
			d.NextAt = now
			hk.scheduleLocked(d)
		}
		e.waiting = nil
		if e.cancelAttempts != nil {
			e.cancelAttempts()
			e.attempts, e.cancelAttempts = nil, nil
		}
	}
}

// trimFeed drops the feed entries older than feedKeep. One caller at a
// time (the leader's tick).
func (hk *hooks) trimFeed(ctx context.Context, now time.Time) error {
	sh := hk.share
	if now.Sub(sh.trimmed) < feedTrim {
		return nil
	}
	sh.trimmed = now
	gen, err := counter(ctx, sh.st, shareGen)
	if err != nil {
		return err
	}
	sh.marks = append(sh.marks, feedMark{now, gen})
	i := 0
	for i < len(sh.marks) && now.Sub(sh.marks[i].at) > feedKeep {
		i++
	}
	if i == 0 {
		return nil
	}
	floor := sh.marks[i-1].gen
	sh.marks = sh.marks[i:]
	old, err := sh.st.ZRange(ctx, shareFeed, math.MinInt64, floor, 0, false)
	if err != nil {
		return err
	}
	// The floor first: a replica that reads it below its own mark reads
	// the state again rather than miss what goes.
	ws := []store.Write{{Key: shareFloor, Val: []byte(strconv.FormatInt(floor, 10))}}
	for _, m := range old {
		ws = append(ws, store.Write{Key: shareFeed, Member: m.Member})
	}
	return sh.st.Apply(ctx, ws)
}
