package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"deeplink/internal/store"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fairness (docs/configuration.md, fairness): each API key has a request
// budget, and each store a share of the live auth codes. Both are counted
// in the store, with Add counters that expire, so that replicas sharing a
// store share the counts; each process tallies its own part in memory and
// adds it to the store's counter at most every tallyEvery (tallies), so
// that a request waits for no counter's write but a few a second.

// limitPrefix starts the store keys of the fairness counters.
const limitPrefix = "limit:"

// keyIndex returns the index, among st's key hashes, of key (a request's
// X-API-Key, a dashboard sign-in's), or -1. Every key is compared, in
// constant time, so timing tells nothing of which matched.
func keyIndex(st *StoreConfig, key string) int {
	if key == "" {
		return -1
	}
	sum := sha256.Sum256([]byte(key))
	keys := st.KeyHashes()
	idx := -1
	for i := range keys {
		eq := subtle.ConstantTimeCompare(sum[:], keys[i][:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	return idx
}

// keyWindow returns the window the per-key budget is counted in, and how
// many requests one window holds: the time the bucket takes to refill
// from empty (fairness.key_burst over key_rate), at least a second.
func (s *server) keyWindow() (w time.Duration, limit float64) {
	f := s.cfg.Fairness
	w = max(time.Second, time.Duration(float64(f.KeyBurst)/f.KeyRate*float64(time.Second)))
	return w, math.Max(float64(f.KeyBurst), f.KeyRate*w.Seconds())
}

// overKeyBudget spends one request of the budget of st's key k, and
// answers 429 rate_limited with Retry-After when there was none left
// (the request then spends nothing). The bucket is counted as a sliding
// window: this window's count, plus the last one's weighted by how much
// of it the sliding window still covers.
func (s *server) overKeyBudget(ctx context.Context, st *StoreConfig, k *keySlot) *apiError {
	w, limit := s.keyWindow()
	now := s.now().UnixNano()
	n := now / int64(w)
	frac := float64(now%int64(w)) / float64(w)
	kv := &k.win
	kw := kv.Load()
	if kw == nil || kw.n != n {
		cur := tallyID{kind: k.kind, store: st.ID, sub: k.sub, n: n}
		prev := cur
		prev.n--
		kw = &keyWin{n: n, cur: s.tallies.get(cur, time.Unix(0, (n+2)*int64(w)), now), prev: s.tallies.get(prev, time.Unix(0, (n+1)*int64(w)), now)}
		kv.Store(kw)
	}
	c := kw.cur.add(ctx, 1, now)
	p := kw.prev.add(ctx, 0, now)
	if float64(p)*(1-frac)+float64(c) <= limit {
		return nil
	}
	kw.cur.add(ctx, -1, now)
	wait := (1 - frac) * w.Seconds() // this window's end
	if float64(c) <= limit && p > 0 {
		// When the last window's weight has shrunk enough.
		wait = (1 - (limit-float64(c))/float64(p) - frac) * w.Seconds()
	}
	return &apiError{Status: http.StatusTooManyRequests, Code: "rate_limited",
		Message:    "this API key is over its request budget; retry later",
		retryAfter: max(1, int(math.Ceil(wait)))}
}

// errStoreFull is the answer of a store over its share of live codes.
var errStoreFull = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
	Message: "this store is over its share of the service's memory budget; retry later", retryAfter: 5}

// codeSlots is how many slots a store's live codes (and sessions) are
// counted in: a code is counted in the slot of its expiry, a counter that
// expires when the slot ends, when every code counted in it has.
const codeSlots = 16

// slotLen is the length of a slot of live codes, or of sessions, which
// live ttl.
func slotLen(ttl time.Duration) int64 {
	return max(int64(time.Second), int64(ttl)/codeSlots)
}

// overStoreShare reports whether st's sign-ins hold their share of live
// entries (Config.StoreShare) or more: each code registered and not
// expired, redeemed ones included (a redeemed code's entry lives out its
// TTL), two for each session (its token, and its code's replay key), and
// one for each dashboard session. (The webhook state has budgets of its
// own: five endpoints a store, and delivery_log_size deliveries each.)
//
// The slots' sum is kept for shareFresh, plus this process's codes since:
// summing the slots on every registration would cost the register path
// far more than its share of a core (bench/README.md).
func (s *server) overStoreShare(ctx context.Context, st *StoreConfig) bool {
	share := int64(s.cfg.StoreShare())
	now := s.now().UnixNano()
	v := s.views.of(st.ID)
	if n, at := v.n.Load(), v.at.Load(); now-at < int64(shareFresh) && now >= at && n < share {
		return false
	}
	var n int64
	for _, k := range [...]struct {
		kind string
		ttl  time.Duration
	}{{"codes:", s.cfg.AuthCodeTTL.D()}, {"sessions:", s.cfg.SessionTTL.D()}, {"dash:", s.cfg.Dashboard.SessionTTL.D()}} {
		l := slotLen(k.ttl)
		for i := now / l; i <= (now+int64(k.ttl))/l; i++ {
			n += s.tallies.add(ctx, tallyID{kind: k.kind, store: st.ID, n: i}, 0, time.Unix(0, (i+1)*l), now)
		}
	}
	v.n.Store(n)
	v.at.Store(now)
	return n >= share
}

// countCode counts a code of st, registered just now to expire at exp.
func (s *server) countCode(ctx context.Context, st *StoreConfig, exp time.Time) {
	s.countLive(ctx, st, &s.views.of(st.ID).codeSlot, "codes:", s.cfg.AuthCodeTTL.D(), exp, 1)
}

// countSession counts the two entries of a session of st, made just now
// to expire at exp.
func (s *server) countSession(ctx context.Context, st *StoreConfig, exp time.Time) {
	s.countLive(ctx, st, &s.views.of(st.ID).sessionSlot, "sessions:", s.cfg.SessionTTL.D(), exp, 2)
}

// countDashSession counts a dashboard session of st, made just now to
// expire at exp.
func (s *server) countDashSession(ctx context.Context, st *StoreConfig, exp time.Time) {
	s.countLive(ctx, st, &s.views.of(st.ID).dashSlot, "dash:", s.cfg.Dashboard.SessionTTL.D(), exp, 1)
}

// countLive adds n entries of st that expire at exp to the slot counter
// of kind whose entries live ttl; last is the slot it added to last.
func (s *server) countLive(ctx context.Context, st *StoreConfig, last *atomic.Pointer[slotWin], kind string, ttl time.Duration, exp time.Time, n int64) {
	l := slotLen(ttl)
	i := exp.UnixNano() / l
	now := s.now().UnixNano()
	sw := last.Load()
	if sw == nil || sw.i != i {
		sw = &slotWin{i: i, t: s.tallies.get(tallyID{kind: kind, store: st.ID, n: i}, time.Unix(0, (i+1)*l), now)}
		last.Store(sw)
	}
	sw.t.add(ctx, n, now)
	s.views.of(st.ID).n.Add(n)
}

// shareFresh is how long a store's sum of live codes is used before its
// slots are summed again.
const shareFresh = 10 * time.Millisecond

// views are, by configured store id, what the hot paths keep at hand of
// a store's counts: made with the server, read-only after, so that
// looking one up takes no lock.
type views struct {
	m map[string]*storeView
}

// storeView is one store's: the sum of its live entries as overStoreShare
// last made it, plus this process's since; its keys' (keySlot), and the
// slots it last counted codes, sessions and dashboard sessions in.
type storeView struct {
	n                     atomic.Int64 // live entries
	at                    atomic.Int64 // when summed (Unix nanoseconds); 0: never
	keys                  []keySlot    // the configuration file's, by index among its key hashes
	merchant              sync.Map     // serial → *keySlot: the merchant area's keys met so far
	codeSlot, sessionSlot atomic.Pointer[slotWin]
	dashSlot              atomic.Pointer[slotWin]
}

// keySlot is what a process keeps of one API key of a store: the tallies
// of its budget's windows, and the minute of its last use it wrote
// (keyUsed). Its counters are named by kind and sub: "key:" and the
// index of a key of the configuration file, "mkey:" and the serial of a
// key of the merchant area, which no other key of the store ever has.
type keySlot struct {
	id   string // key_…
	kind string
	sub  int
	win  atomic.Pointer[keyWin]
	used atomic.Int64 // Unix minutes
}

// keyWin is a key's current window and the last one.
type keyWin struct {
	n         int64
	cur, prev *tally
}

// slotWin is a slot counter.
type slotWin struct {
	i int64
	t *tally
}

func newViews(cfg *Config) views {
	v := views{m: map[string]*storeView{}}
	for _, st := range cfg.Stores {
		sv := &storeView{keys: make([]keySlot, len(st.KeyHashes()))}
		for i, h := range st.KeyHashes() {
			sv.keys[i].id, sv.keys[i].kind, sv.keys[i].sub = keyID(h), "key:", i
		}
		v.m[st.ID] = sv
	}
	return v
}

// of returns the view of the store whose configured id is id. (A store
// not configured has a view of its own each time, never fresh.)
func (v *views) of(id string) *storeView {
	if sv := v.m[id]; sv != nil {
		return sv
	}
	return &storeView{}
}

// configKey returns the slot of the store's key number idx among the
// configuration file's.
func (sv *storeView) configKey(idx int) *keySlot {
	if idx < len(sv.keys) {
		return &sv.keys[idx]
	}
	return &keySlot{kind: "key:", sub: idx}
}

// merchantKey returns the slot of the merchant area's key k.
func (sv *storeView) merchantKey(k *merchantKey) *keySlot {
	if ks, ok := sv.merchant.Load(k.Serial); ok {
		return ks.(*keySlot)
	}
	ks, _ := sv.merchant.LoadOrStore(k.Serial, &keySlot{id: k.ID, kind: "mkey:", sub: k.Serial})
	return ks.(*keySlot)
}

// tallyEvery is how often a process adds its tally of a counter to the
// store's, reading the others' part back: what other replicas counted is
// seen that late, and a process that stops loses at most that much of
// its own.
const tallyEvery = 100 * time.Millisecond

// tallyID names a fairness counter: its kind, store, key index (sub) and
// window or slot (n). Its store key is limitPrefix + kind + store + sub +
// n; a struct, so that looking a tally up builds no string.
type tallyID struct {
	kind  string
	store string
	sub   int
	n     int64
}

func (id tallyID) key() string {
	return limitPrefix + id.kind + id.store + ":" + strconv.Itoa(id.sub) + ":" + strconv.FormatInt(id.n, 10)
}

// tallies are this process's view of the fairness counters.
type tallies struct {
	st store.Store // where the counters are added up

	mu sync.Mutex // guards m; a tally's own fields are atomic
	m  map[tallyID]*tally
}

// tally is one counter: the store's value when last read, which includes
// what this process added before, plus what it added since. Its fields
// are atomic, so that requests counting with it take no lock: 32 of them
// woken at once by a shared fsync would queue on one.
type tally struct {
	st              store.Store // where it is added up (tallies.st)
	id              tallyID
	exp             time.Time // the counter's expiry
	stored, pending atomic.Int64
	read            atomic.Int64 // when stored was read (Unix nanoseconds)
	busy            atomic.Bool  // a request is adding pending to the store
}

// get returns the tally of the counter id, which expires at exp.
func (ts *tallies) get(id tallyID, exp time.Time, now int64) *tally {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[id]
	if t == nil {
		// Nothing is read or written for a new tally before tallyEvery:
		// a burst's first request waits for no write, and a process's
		// first requests are counted against what it has seen so far.
		t = &tally{st: ts.st, id: id, exp: exp}
		t.read.Store(now)
		ts.m[id] = t
	}
	return t
}

// add adds delta to the counter id (which expires at exp) and returns its
// value (tally.add).
func (ts *tallies) add(ctx context.Context, id tallyID, delta int64, exp time.Time, now int64) int64 {
	return ts.get(id, exp, now).add(ctx, delta, now)
}

// add adds delta to t and returns its value. When the store's value is
// older than tallyEvery, this request adds the pending part to the store
// and reads the sum back (Get when there is nothing to add, so reading
// writes nothing); one at a time, the others using the value they have.
// A store that cannot count keeps the part pending: the budgets are
// guards, not reasons to refuse.
func (t *tally) add(ctx context.Context, delta int64, now int64) int64 {
	if delta != 0 {
		t.pending.Add(delta)
	}
	if now-t.read.Load() < int64(tallyEvery) || !t.busy.CompareAndSwap(false, true) {
		return t.stored.Load() + t.pending.Load()
	}
	d := t.pending.Swap(0)
	t.stored.Add(d) // counted meanwhile as it was
	var stored int64
	var err error
	if d != 0 {
		stored, err = t.st.Add(ctx, t.id.key(), d, t.exp)
	} else {
		var v []byte
		if v, err = t.st.Get(ctx, t.id.key()); err == nil {
			stored, _ = strconv.ParseInt(string(v), 10, 64)
		} else if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
	}
	if err == nil {
		t.stored.Store(stored)
	}
	// After an error d is not sent again: the store may have added it all
	// the same (an answer that timed out), and a guard that counts a
	// request twice refuses another's. At worst the shared count misses it.
	t.read.Store(now)
	t.busy.Store(false)
	return t.stored.Load() + t.pending.Load()
}

// sweep adds to the store what is pending of every tally not written for
// tallyEvery (a burst's last requests, which no later request writes),
// and forgets the tallies of counters that have expired. It is for the
// timed work, not requests: it waits for the writes.
func (ts *tallies) sweep(ctx context.Context, now time.Time) {
	var due []*tally
	ts.mu.Lock()
	for id, t := range ts.m {
		switch {
		case !t.exp.IsZero() && t.exp.Before(now):
			delete(ts.m, id)
		case t.pending.Load() != 0:
			due = append(due, t)
		}
	}
	ts.mu.Unlock()
	for _, t := range due {
		t.add(ctx, 0, now.UnixNano())
	}
}
