// Package embedded is the store of one process: Go maps in memory under
// per-shard mutexes, an append-only journal in a directory with group
// commit, and a snapshot the journal is folded into from time to time.
//
// A change is applied in memory and its record appended to the journal
// under the lock of the entry's shard, so records of one key are in the
// journal in the order the changes were made. With Durability "fsync" a
// method returns once its record is written and fsynced; changes made
// concurrently share one write and one fsync. With "interval" it returns
// at once and the journal is written and fsynced within a second.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/store"
)

// Durability says when a change is acknowledged.
type Durability string

const (
	// Fsync acknowledges a change once it is on disk.
	Fsync Durability = "fsync"
	// Interval acknowledges at once and writes within a second.
	Interval Durability = "interval"
)

// Options configure Open.
type Options struct {
	Durability Durability // Fsync when empty
	// MaxLive caps the live entries (sets' members not counted); a change
	// that would add one more fails with store.ErrFull. 0: no cap.
	MaxLive int
	// Now is the clock that decides expiry; time.Now when nil.
	Now func() time.Time
	// Logger gets the warnings (a torn journal tail dropped) and the
	// failures of background writes; slog.Default when nil.
	Logger *slog.Logger
	// FoldAt is the journal size past which it is folded into a new
	// snapshot (also once the journal outgrows twice the last snapshot);
	// 64 MiB when 0.
	FoldAt int64
}

// numShards splits the entries so that concurrent requests rarely share a
// lock.
const numShards = 64

// DB is the embedded store. It implements store.Store.
type DB struct {
	now    func() time.Time
	log    *slog.Logger
	seed   maphash.Seed
	max    int64
	live   atomic.Int64 // entries in the shards, expired ones not yet swept included
	closed atomic.Bool

	shards [numShards]shard

	setsMu sync.Mutex // guards sets
	sets   map[string]*zset

	j *journal // nil for a DB without a directory

	stop    chan struct{}  // closed by Close: background work ends
	bg      sync.WaitGroup // the sweeper and the journal's writer
	closing sync.Mutex     // one Close at a time
}

type shard struct {
	mu sync.Mutex // guards m
	m  map[string]entry
}

type entry struct {
	val []byte
	exp int64 // unix ns; 0 never
}

func (e entry) liveAt(now int64) bool { return e.exp == 0 || e.exp > now }

var _ store.Store = (*DB)(nil)

// Open restores the state kept in dir (created if missing) and starts
// keeping it there. dir == "" keeps nothing on disk (tests, and the demo
// of a build without a filesystem). Damage in the middle of a file fails
// Open with one line naming the file and the offset; a record cut short
// at the end of the last journal (a crash mid-write) is dropped with a
// warning.
func Open(dir string, o Options) (*DB, error) {
	db := &DB{
		now:  o.Now,
		log:  o.Logger,
		seed: maphash.MakeSeed(),
		max:  int64(o.MaxLive),
		sets: map[string]*zset{},
		stop: make(chan struct{}),
	}
	if db.now == nil {
		db.now = time.Now
	}
	if db.log == nil {
		db.log = slog.Default()
	}
	for i := range db.shards {
		db.shards[i].m = map[string]entry{}
	}
	switch o.Durability {
	case "", Fsync, Interval:
	default:
		return nil, fmt.Errorf("durability %q: want %q or %q", o.Durability, Fsync, Interval)
	}
	if dir != "" {
		j, err := openJournal(db, dir, o)
		if err != nil {
			return nil, err
		}
		db.j = j
	}
	db.bg.Add(1)
	go db.sweeper()
	return db, nil
}

func (db *DB) shard(key string) *shard {
	return &db.shards[maphash.String(db.seed, key)%numShards]
}

func (db *DB) nowNano() int64 { return db.now().UnixNano() }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// writable fails when changes cannot be kept: closed, or the journal
// failing. Checked before a change is made, so that while the disk fails
// almost nothing is changed in memory that was not acknowledged.
func (db *DB) writable() error {
	if db.closed.Load() {
		return fmt.Errorf("%w: closed", store.ErrUnavailable)
	}
	if db.j != nil {
		return db.j.failing()
	}
	return nil
}

// commit waits until the record that ends at pos is as durable as the
// DB's durability asks.
// Through a Deferred, it notes the ticket for the Deferred's Wait.
func (db *DB) commit(ctx context.Context, t ticket) error {
	if db.j == nil {
		return nil
	}
	if d, ok := ctx.Value(deferKey{}).(*Deferred); ok {
		d.add(t)
		return nil
	}
	return db.j.wait(ctx, t)
}

// logLocked journals r; the caller holds the lock of r's shard (or of the
// sets), so that records of one key keep the order of the changes.
func (db *DB) logLocked(r record) ticket {
	if db.j == nil {
		return ticket{}
	}
	return db.j.append(r)
}

// unchanged is the ticket of a change that finds nothing to do. What it
// found may be a change not yet on disk (the delete of a key that an
// unanswered take removed), so it is answered once every change before it
// is on disk too.
func (db *DB) unchanged() ticket {
	if db.j == nil {
		return ticket{}
	}
	return db.j.barrier()
}

func (db *DB) Get(ctx context.Context, key string) ([]byte, error) {
	if db.closed.Load() {
		return nil, fmt.Errorf("%w: closed", store.ErrUnavailable)
	}
	sh := db.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok || !e.liveAt(db.nowNano()) {
		return nil, store.ErrNotFound
	}
	return slices.Clone(e.val), nil
}

func (db *DB) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		v, err := db.Get(ctx, k)
		switch {
		case err == nil:
			out[i] = v
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// change makes key hold what f makes of the entry there now (found: it is
// live), or deletes it when f says so, and returns the value that was
// there when it was live. It is the one way every change is made: under
// the shard's lock, journaled under it, committed after it.
func (db *DB) change(ctx context.Context, key string, f func(old entry, found bool) (next entry, del bool, err error)) ([]byte, error) {
	old, t, err := db.changeLocked(key, f)
	if err != nil {
		return nil, err
	}
	if err := db.commit(ctx, t); err != nil {
		return nil, err
	}
	return old, nil
}

// changeLocked is change without the wait for the change to be durable:
// it returns the ticket to wait on.
func (db *DB) changeLocked(key string, f func(old entry, found bool) (next entry, del bool, err error)) ([]byte, ticket, error) {
	if err := db.writable(); err != nil {
		return nil, ticket{}, err
	}
	now := db.nowNano()
	sh := db.shard(key)
	sh.mu.Lock()
	old, had := sh.m[key]
	found := had && old.liveAt(now)
	next, del, err := f(old, found)
	if err == nil && !del && !had && !db.reserve() {
		err = store.ErrFull
	}
	if err != nil {
		sh.mu.Unlock()
		return nil, ticket{}, err
	}
	var t ticket
	switch {
	case del && !had:
		t = db.unchanged()
	case del && had:
		delete(sh.m, key)
		db.live.Add(-1)
		t = db.logLocked(record{op: opDel, key: key})
	case !del:
		if next.val == nil {
			next.val = []byte{}
		}
		sh.m[key] = next
		t = db.logLocked(record{op: opPut, key: key, val: next.val, n: next.exp})
	}
	sh.mu.Unlock()
	if !found {
		return nil, t, nil
	}
	return old.val, t, nil // values are never changed in place: old stays the caller's
}

func (db *DB) Apply(ctx context.Context, ws []store.Write) error {
	if err := store.CheckOld(ws); err != nil {
		return err
	}
	var last ticket
	for _, w := range ws {
		var t ticket
		var err error
		switch {
		case w.Old != nil:
			e := entry{val: slices.Clone(w.Val), exp: unixNano(w.Exp)}
			_, t, err = db.changeLocked(w.Key, func(cur entry, found bool) (entry, bool, error) {
				if !found || string(cur.val) != string(w.Old) {
					return e, false, store.ErrConflict
				}
				return e, w.Val == nil, nil
			})
		case w.Add != 0:
			_, t, err = db.changeLocked(w.Key, counter(w.Key, w.Add, w.Exp, nil))
		case w.Member != "":
			t, err = db.setChange(w.Key, w.Member, w.Val != nil, w.Score)
		case w.Val == nil:
			_, t, err = db.changeLocked(w.Key, func(entry, bool) (entry, bool, error) { return entry{}, true, nil })
		default:
			e := entry{val: slices.Clone(w.Val), exp: unixNano(w.Exp)}
			_, t, err = db.changeLocked(w.Key, func(entry, bool) (entry, bool, error) { return e, false, nil })
		}
		if err != nil {
			return err
		}
		if t.b != nil {
			last = t
		}
	}
	// Batches are written in order, and a batch after a failed one fails
	// too: the last one's outcome is all of theirs.
	return db.commit(ctx, last)
}

// reserve counts one more entry unless the DB holds its maximum. Check and
// count are one step, as changes in different shards run concurrently.
func (db *DB) reserve() bool {
	for {
		n := db.live.Load()
		if db.max > 0 && n >= db.max {
			return false
		}
		if db.live.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (db *DB) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	e := entry{val: slices.Clone(val), exp: unixNano(exp)}
	_, err := db.change(ctx, key, func(entry, bool) (entry, bool, error) { return e, false, nil })
	return err
}

func (db *DB) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	e := entry{val: slices.Clone(val), exp: unixNano(exp)}
	_, err := db.change(ctx, key, func(_ entry, found bool) (entry, bool, error) {
		if found {
			return e, false, store.ErrExists
		}
		return e, false, nil
	})
	return err
}

func (db *DB) Swap(ctx context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	e := entry{val: slices.Clone(val), exp: unixNano(exp)}
	return db.change(ctx, key, func(old entry, found bool) (entry, bool, error) {
		if !found {
			return e, false, store.ErrNotFound
		}
		if exp.IsZero() {
			e.exp = old.exp
		}
		return e, false, nil
	})
}

func (db *DB) Extend(ctx context.Context, key string, exp time.Time) error {
	x := unixNano(exp)
	_, err := db.change(ctx, key, func(old entry, found bool) (entry, bool, error) {
		if !found {
			return old, false, store.ErrNotFound
		}
		if old.exp != 0 && (x == 0 || x > old.exp) {
			old.exp = x
		}
		return old, false, nil
	})
	return err
}

func (db *DB) Take(ctx context.Context, key string) ([]byte, error) {
	return db.change(ctx, key, func(_ entry, found bool) (entry, bool, error) {
		if !found {
			return entry{}, true, store.ErrNotFound
		}
		return entry{}, true, nil
	})
}

func (db *DB) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	e := entry{val: slices.Clone(val), exp: unixNano(exp)}
	_, err := db.change(ctx, key, func(cur entry, found bool) (entry, bool, error) {
		if old == nil && found || old != nil && (!found || string(cur.val) != string(old)) {
			return e, false, store.ErrConflict
		}
		if exp.IsZero() && found {
			e.exp = cur.exp
		}
		return e, val == nil, nil
	})
	return err
}

func (db *DB) Delete(ctx context.Context, key string) error {
	_, err := db.change(ctx, key, func(entry, bool) (entry, bool, error) { return entry{}, true, nil })
	return err
}

func (db *DB) Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error) {
	var n int64
	_, err := db.change(ctx, key, counter(key, delta, exp, &n))
	return n, err
}

// counter is the change of Add: delta added to the counter at key, which
// starts at 0 until exp when not live; the new value goes to *n (n nil:
// nowhere).
func counter(key string, delta int64, exp time.Time, n *int64) func(old entry, found bool) (entry, bool, error) {
	return func(old entry, found bool) (entry, bool, error) {
		v, x := int64(0), unixNano(exp)
		if found {
			var err error
			if v, err = strconv.ParseInt(string(old.val), 10, 64); err != nil {
				return old, false, fmt.Errorf("store: Add to %q, which holds no counter", key)
			}
			x = old.exp
		}
		if n != nil {
			*n = v + delta
		}
		return entry{val: strconv.AppendInt(nil, v+delta, 10), exp: x}, false, nil
	}
}

// Len returns the entries held, expired ones not yet swept included.
func (db *DB) Len() int { return int(db.live.Load()) }

// Count returns the live entries whose key has prefix and whose value
// satisfies keep. It visits every entry: it is for scrapes, not requests.
func (db *DB) Count(prefix string, keep func(val []byte) bool) int {
	now := db.nowNano()
	n := 0
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.liveAt(now) && len(k) >= len(prefix) && k[:len(prefix)] == prefix && keep(e.val) {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// sweepEvery is how often expired entries are dropped from memory. Expiry
// itself is exact (every read checks it); the sweep only frees memory and
// room under MaxLive.
const sweepEvery = 5 * time.Second

func (db *DB) sweeper() {
	defer db.bg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
			db.Sweep()
		}
	}
}

// Sweep drops the expired entries from memory. Nothing is journaled: an
// expired record is dropped when the journal is read, too.
func (db *DB) Sweep() {
	now := db.nowNano()
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if !e.liveAt(now) {
				delete(sh.m, k)
				db.live.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// Close writes what is pending, folds the journal into a snapshot so
// that the next Open reads one file, and stops the background work. When
// writing fails it returns the error, and a later Close tries again;
// changes are refused from the first Close on.
func (db *DB) Close() error {
	db.closing.Lock()
	defer db.closing.Unlock()
	if !db.closed.Swap(true) {
		close(db.stop)
	}
	if db.j == nil {
		db.bg.Wait()
		return nil
	}
	err := db.j.close()
	db.bg.Wait()
	return err
}

// Sync writes and fsyncs every change made so far, whatever the
// durability: for a caller that must not lose what it changed when it
// ends (the edge build, whose instance may be thrown away between calls).
func (db *DB) Sync() error {
	if db.j == nil {
		return nil
	}
	j := db.j
	t := j.barrier()
	if t.b == nil { // all written, or closed: Close writes what was made before
		return j.failing()
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
	<-t.b.done
	return t.b.err
}

// Failing reports the journal's failure, if any: nil while changes are
// kept. The service's changes answer 503 while it is not nil.
func (db *DB) Failing() error {
	if db.closed.Load() {
		return fmt.Errorf("%w: closed", store.ErrUnavailable)
	}
	if db.j == nil {
		return nil
	}
	return db.j.failing()
}
