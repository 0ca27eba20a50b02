package webhook

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
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
//     records they name (feed.go). Reads catch up first too, so that
//     a change answered by one replica is seen by the next request to
//     any.
//   - One replica at a time, the leader, holding a lease, sends the
//     deliveries, and it alone changes deliveries once made (attempts,
//     their end, trimming the log): it takes in only the deliveries it
//     does not have, and applies the consequences of the others' endpoint
//     changes itself (a disabled endpoint's queue failed). The others
//     make deliveries (publish, test, retry) and change endpoints. A
//     leader that dies leaves its lease to expire; another takes it over
//     and sends what is pending, from the last written state
//     (lease.go).
//
// A single process (the embedded store) shares nothing: hooks.share is
// nil and the copy is the state, written through.
const (
	ShareLock  = "hooks:lock"  // the webhook lock: a holder's token, expiring
	ShareLead  = "hooks:lead"  // the leader's lease: its name, expiring
	ShareGen   = "hooks:gen"   // the change feed's counter
	ShareEpoch = "hooks:epoch" // a random name of the feed, made again when the store lost it
	ShareFeed  = "hooks:feed"  // the change feed: the records each write wrote, by the counter (feedMember)
	ShareFloor = "hooks:floor" // the counter below which feed entries were dropped

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
	FeedTrim = 10 * time.Second // how often the leader drops what is older
	// followEvery is how often the native leader takes in what the
	// others wrote (besides its tick): the deliveries they made wait for
	// it before they are sent.
	followEvery = 100 * time.Millisecond
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
	Mu     sync.Mutex    // guards the fields below
	taking bool          // a change is taking the lock (and catching up)
	Cur    *hold         // the lock this process holds, open to joiners or being let go; nil when none
	turn   chan struct{} // closed when taking or cur changes

	// Guarded by hooks.persistMu: one catch-up or persist at a time.
	seen   int64  // the last feed entry this copy has taken in
	epoch  string // the feed's name when it did
	behind bool   // the copy is to be read again whole (a leader stepped down: it took no delivery in)

	// Only tick uses these, one caller at a time.
	leaseEnd time.Time  // when the lease held runs out, at the latest
	marks    []feedMark // the counter every feedTrim, for trimming the feed
	trimmed  time.Time  // the last trim
}

// hold is one taking of the store's lock by this process, and the
// changes made under it.
type hold struct {
	token     []byte             // in the store
	Since     time.Time          // when it was taken
	work      context.Context    // the changes' context: ends lockWork after since
	stop      context.CancelFunc // ends work
	holders   int                // changes under way; sharing.mu guards
	releasing bool               // the last has ended: no more join; sharing.mu guards
}

// feedMark is the counter at a time.
type feedMark struct {
	at  time.Time
	gen int64
}

// ReplicaName names a process among the replicas: its machine, pid and
// a random part.
func ReplicaName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), strings.ToLower(rand.Text()[:8]))
}

// ShareWith makes hk a replica of the state shared in st, a follower
// until its tick takes the lead, named name in the lock's tokens and
// the lease ("" for ReplicaName). It is called before loadStore: what is
// written after the counter is read is taken in by the first catchUp.
func (hk *Hooks) ShareWith(ctx context.Context, st store.Store, name string) error {
	if name == "" {
		name = ReplicaName()
	}
	sh := &sharing{st: st, turn: make(chan struct{}), name: name}
	epoch, err := sh.readEpoch(ctx)
	if err != nil {
		return err
	}
	gen, err := Counter(ctx, st, ShareGen)
	if err != nil {
		return err
	}
	sh.seen, sh.epoch = gen, epoch
	hk.Share, hk.Leading = sh, false
	return nil
}

// readEpoch returns the feed's name, naming it first if the store has
// none (the first replica's start, or a store that lost its data): a
// replica that finds another name than the one it knew reads the whole
// state again, since the counter alone may have come back to where it
// was.
func (sh *sharing) readEpoch(ctx context.Context) (string, error) {
	b, err := sh.st.Get(ctx, ShareEpoch)
	if errors.Is(err, store.ErrNotFound) {
		err = sh.st.Insert(ctx, ShareEpoch, []byte(rand.Text()), time.Time{})
		if err == nil || errors.Is(err, store.ErrExists) {
			b, err = sh.st.Get(ctx, ShareEpoch)
		}
	}
	return string(b), err
}

// errLockBusy: the webhook lock was not free within the wait allowed.
var errLockBusy = fmt.Errorf("webhooks: the lock of the shared state stayed taken: %w", store.ErrUnavailable)

// lock takes the store's webhook lock for this process, or joins the
// changes made under it (sharing), on the copy caught up. The caller
// makes its change, persists it with the context returned (it ends
// lockWork after the lock was taken) and calls unlock. ctx bounds the
// wait.
func (hk *Hooks) Lock(ctx context.Context) (work context.Context, unlock func(), err error) {
	sh := hk.Share
	for {
		sh.Mu.Lock()
		h := sh.Cur
		switch {
		case h != nil && !h.releasing && time.Since(h.Since) < lockJoin:
			h.holders++
			sh.Mu.Unlock()
			return h.work, func() { sh.leave(h) }, nil
		case h == nil && !sh.taking:
			sh.taking = true
			sh.Mu.Unlock()
			h, err := hk.take(ctx)
			sh.Mu.Lock()
			sh.taking = false
			if err == nil {
				sh.Cur = h // open to joiners only now: caught up
			}
			sh.next()
			sh.Mu.Unlock()
			if err != nil {
				return nil, nil, err
			}
			return h.work, func() { sh.leave(h) }, nil
		}
		turn := sh.turn
		sh.Mu.Unlock()
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

// take takes the store's lock and catches the copy up, for lock; the
// hold returned has one holder, its caller.
func (hk *Hooks) take(ctx context.Context) (*hold, error) {
	sh := hk.Share
	h := &hold{Since: time.Now(), holders: 1,
		token: []byte(sh.name + "/" + strconv.FormatUint(sh.n.Add(1), 10))}
	h.work, h.stop = context.WithTimeout(context.WithoutCancel(ctx), lockWork)
	wait := time.Millisecond
	for {
		err := sh.st.Insert(h.work, ShareLock, h.token, time.Now().Add(lockTTL))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrExists) {
			h.stop()
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-h.work.Done():
		case <-t.C:
			wait = min(2*wait, 20*time.Millisecond)
			continue
		}
		t.Stop()
		h.stop()
		return nil, errLockBusy
	}
	if err := hk.CatchUp(h.work, true); err != nil {
		sh.letGo(h)
		return nil, err
	}
	return h, nil
}

// leave ends a change made under h; the last lets the lock go, and no
// change joins h from then on.
func (sh *sharing) leave(h *hold) {
	sh.Mu.Lock()
	h.holders--
	last := h.holders == 0
	if last {
		h.releasing = true
	}
	sh.Mu.Unlock()
	if !last {
		return
	}
	sh.letGo(h)
	sh.Mu.Lock()
	sh.Cur = nil
	sh.next()
	sh.Mu.Unlock()
}

// letGo gives the store's lock of h back. It is best effort: should it
// fail, the lock expires.
func (sh *sharing) letGo(h *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), lockWork)
	sh.st.CompareAndSwap(ctx, ShareLock, h.token, nil, time.Time{})
	cancel()
	h.stop()
}

// next wakes the changes waiting for their turn. sh.mu must be held.
func (sh *sharing) next() {
	close(sh.turn)
	sh.turn = make(chan struct{})
}

// locked runs change under the lock (when shared) and persists what it
// changed.
func (hk *Hooks) Locked(ctx context.Context, change func()) error {
	if hk.Share == nil {
		change()
		return hk.Persist(ctx)
	}
	work, unlock, err := hk.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	change()
	return hk.Persist(work)
}

// sync writes what the copy changed outside a request (the dispatcher's
// outcomes, what the leader did about the others' changes): under the
// lock when shared, and then only if there is something to write.
func (hk *Hooks) Sync(ctx context.Context) error {
	if hk.Share == nil {
		return hk.Persist(ctx)
	}
	hk.persistMu.Lock()
	done := hk.persistedGen
	hk.persistMu.Unlock()
	hk.Mu.Lock()
	idle := hk.touchGen <= done
	hk.Mu.Unlock()
	if idle && !hk.PersistBad.Load() {
		return nil
	}
	return hk.Locked(ctx, func() {})
}

// ForgetHolders removes the lock and the lease from st, a store no other
// process uses (the edge host's embedded one): a process that died
// holding them would otherwise keep every change waiting for the lock,
// and the deliveries for the lease, until they expire.
func ForgetHolders(ctx context.Context, st store.Store) error {
	for _, k := range []string{ShareLock, ShareLead} {
		if err := st.Delete(ctx, k); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Follow takes in what the other replicas wrote and writes what that
// changed here: for a sender whose host answers for a follower's change
// (the edge host, for its module), so that its consequences (a disabled
// endpoint's queue failed) are written before the answer, as one
// process writes them.
func (hk *Hooks) Follow(ctx context.Context) error {
	if err := hk.Fresh(ctx); err != nil {
		return err
	}
	return hk.Sync(ctx)
}

// ClearLockOf removes the lock from st if the replica named name holds
// it: for a replica known to be dead (the edge host's instance that was
// cut off), which would otherwise keep every change waiting until the
// lock expires. Any other holder's lock is left as it is.
func ClearLockOf(ctx context.Context, st store.Store, name string) error {
	tok, err := st.Get(ctx, ShareLock)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil || !strings.HasPrefix(string(tok), name+"/") {
		return err
	}
	err = st.CompareAndSwap(ctx, ShareLock, tok, nil, time.Time{})
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return nil // taken or let go meanwhile: not the dead one's
	}
	return err
}
