package embedded

import (
	"context"
	"sync"
	"time"

	"deeplink/internal/store"
)

// Deferred is a view of a DB for a caller that answers for a run of
// changes at once, later: its changes are made and journaled as the DB's
// own, but its methods return without waiting for them to be durable,
// and Wait waits for all of them. The edge host serves each call into a
// module instance through one: the instance is free for its next request
// while the host waits, so that one fsync is shared by every request
// under way, not by one per instance.
//
// A Deferred is for one run of changes; it is safe for concurrent use.
type Deferred struct {
	db     *DB
	unkept bool // NoWait's: Wait waits for nothing

	mu      sync.Mutex // guards batches
	batches []*batch   // the batches of the changes made, in order
}

// NoWait returns a view of db whose changes are made and journaled as
// the DB's own, in order with them, but never waited for: they are as
// durable as the journal's next write makes them (within a second), and
// a crash may lose the last of them. For a caller whose changes nobody
// is answered for (the webhook sender's attempts: one whose outcome a
// crash lost is made again).
func (db *DB) NoWait() *Deferred { return &Deferred{db: db, unkept: true} }

// deferKey carries a Deferred to DB.commit in its methods' contexts.
type deferKey struct{}

// Defer returns a fresh view of db whose changes Wait makes durable.
func (db *DB) Defer() *Deferred { return &Deferred{db: db} }

// Wait returns once every change made through d so far is as durable as
// the DB's durability promises for an acknowledgement, or with an error
// wrapping store.ErrUnavailable when one of them cannot be (which of them
// were kept, if any, is unknown).
func (d *Deferred) Wait(ctx context.Context) error {
	d.mu.Lock()
	bs := d.batches
	d.batches = nil
	d.mu.Unlock()
	for _, b := range bs {
		if err := d.db.j.wait(ctx, ticket{b}); err != nil {
			return err
		}
	}
	return nil
}

// add notes the batch of a change made through d, and has it written
// now, for the Wait to come.
func (d *Deferred) add(t ticket) {
	if t.b == nil || d.unkept {
		return
	}
	if !d.db.j.interval {
		d.db.j.ask(t)
	}
	d.mu.Lock()
	if n := len(d.batches); n == 0 || d.batches[n-1] != t.b {
		d.batches = append(d.batches, t.b)
	}
	d.mu.Unlock()
}

func (d *Deferred) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferKey{}, d)
}

var _ store.Store = (*Deferred)(nil)

func (d *Deferred) Get(ctx context.Context, key string) ([]byte, error) { return d.db.Get(ctx, key) }

func (d *Deferred) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	return d.db.GetMany(ctx, keys)
}

func (d *Deferred) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	return d.db.Put(d.ctx(ctx), key, val, exp)
}

func (d *Deferred) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	return d.db.Insert(d.ctx(ctx), key, val, exp)
}

func (d *Deferred) Swap(ctx context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	return d.db.Swap(d.ctx(ctx), key, val, exp)
}

func (d *Deferred) Extend(ctx context.Context, key string, exp time.Time) error {
	return d.db.Extend(d.ctx(ctx), key, exp)
}

func (d *Deferred) Take(ctx context.Context, key string) ([]byte, error) {
	return d.db.Take(d.ctx(ctx), key)
}

func (d *Deferred) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	return d.db.CompareAndSwap(d.ctx(ctx), key, old, val, exp)
}

func (d *Deferred) Delete(ctx context.Context, key string) error {
	return d.db.Delete(d.ctx(ctx), key)
}

func (d *Deferred) Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error) {
	return d.db.Add(d.ctx(ctx), key, delta, exp)
}

func (d *Deferred) ZAdd(ctx context.Context, set, member string, score int64) error {
	return d.db.ZAdd(d.ctx(ctx), set, member, score)
}

func (d *Deferred) ZRem(ctx context.Context, set, member string) error {
	return d.db.ZRem(d.ctx(ctx), set, member)
}

func (d *Deferred) ZRange(ctx context.Context, set string, min, max int64, limit int, rev bool) ([]store.Scored, error) {
	return d.db.ZRange(ctx, set, min, max, limit, rev)
}

func (d *Deferred) ZClaim(ctx context.Context, set string, due, until int64, limit int) ([]store.Scored, error) {
	return d.db.ZClaim(d.ctx(ctx), set, due, until, limit)
}

func (d *Deferred) Apply(ctx context.Context, ws []store.Write) error {
	return d.db.Apply(d.ctx(ctx), ws)
}

// Close waits for the changes made through d; the DB stays open.
func (d *Deferred) Close() error { return d.Wait(context.Background()) }
