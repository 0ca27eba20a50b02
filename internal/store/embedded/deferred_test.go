package embedded

import (
	"context"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/storetest"
)

// waited is a DB whose every change goes through a fresh Deferred and
// waits for it, as the edge host's calls do: it must keep the whole
// contract, crashes included.
type waited struct{ *DB }

func (w waited) do(ctx context.Context, f func(v *Deferred) error) error {
	v := w.Defer()
	if err := f(v); err != nil {
		return err
	}
	return v.Wait(ctx)
}

func (w waited) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	return w.do(ctx, func(v *Deferred) error { return v.Put(ctx, key, val, exp) })
}

func (w waited) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	return w.do(ctx, func(v *Deferred) error { return v.Insert(ctx, key, val, exp) })
}

func (w waited) Swap(ctx context.Context, key string, val []byte, exp time.Time) (old []byte, err error) {
	return old, w.do(ctx, func(v *Deferred) error { old, err = v.Swap(ctx, key, val, exp); return err })
}

func (w waited) Extend(ctx context.Context, key string, exp time.Time) error {
	return w.do(ctx, func(v *Deferred) error { return v.Extend(ctx, key, exp) })
}

func (w waited) Take(ctx context.Context, key string) (val []byte, err error) {
	return val, w.do(ctx, func(v *Deferred) error { val, err = v.Take(ctx, key); return err })
}

func (w waited) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	return w.do(ctx, func(v *Deferred) error { return v.CompareAndSwap(ctx, key, old, val, exp) })
}

func (w waited) Delete(ctx context.Context, key string) error {
	return w.do(ctx, func(v *Deferred) error { return v.Delete(ctx, key) })
}

func (w waited) Add(ctx context.Context, key string, delta int64, exp time.Time) (n int64, err error) {
	return n, w.do(ctx, func(v *Deferred) error { n, err = v.Add(ctx, key, delta, exp); return err })
}

func (w waited) ZAdd(ctx context.Context, set, member string, score int64) error {
	return w.do(ctx, func(v *Deferred) error { return v.ZAdd(ctx, set, member, score) })
}

func (w waited) ZRem(ctx context.Context, set, member string) error {
	return w.do(ctx, func(v *Deferred) error { return v.ZRem(ctx, set, member) })
}

func (w waited) ZClaim(ctx context.Context, set string, due, until int64, limit int) (ms []store.Scored, err error) {
	return ms, w.do(ctx, func(v *Deferred) error { ms, err = v.ZClaim(ctx, set, due, until, limit); return err })
}

func (w waited) Apply(ctx context.Context, ws []store.Write) error {
	return w.do(ctx, func(v *Deferred) error { return v.Apply(ctx, ws) })
}

func TestDeferredContract(t *testing.T) {
	b := backend(Fsync, Options{})
	open, restart := b.Open, b.Restart
	b.Open = func(t *testing.T, c *storetest.Clock) store.Store { return waited{open(t, c).(*DB)} }
	b.Restart = func(t *testing.T, s store.Store, c *storetest.Clock, crash bool) store.Store {
		return waited{restart(t, s.(waited).DB, c, crash).(*DB)}
	}
	storetest.Run(t, b)
}

// TestDeferredWait checks that a Deferred's changes are seen at once, and
// are on disk once Wait returns: they survive a crash right after it.
func TestDeferredWait(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	ctx := context.Background()
	v := db.Defer()
	for _, k := range []string{"a", "b", "c"} {
		if err := v.Put(ctx, k, []byte(k), time.Time{}); err != nil {
			t.Fatal(err)
		}
		if got, err := db.Get(ctx, k); err != nil || string(got) != k {
			t.Fatalf("Get(%q) after a deferred Put = %q, %v; want %q", k, got, err, k)
		}
	}
	if err := v.Wait(ctx); err != nil {
		t.Fatalf("Wait() = %v", err)
	}
	db.abandon()
	db = openT(t, dir, Options{})
	defer db.Close()
	for _, k := range []string{"a", "b", "c"} {
		if got, err := db.Get(ctx, k); err != nil || string(got) != k {
			t.Errorf("Get(%q) after Wait and a crash = %q, %v; want %q", k, got, err, k)
		}
	}
}

// TestNoWaitSharesTheNextWrite checks that a change nobody waits for
// (NoWait's) does not start a journal write of its own, unless its batch
// has grown to batchFull, and is on disk within writeEvery all the same,
// though nobody asks.
func TestNoWaitSharesTheNextWrite(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	ctx := context.Background()
	begun, open := stall(db)
	first := make(chan error, 1)
	go func() { first <- db.Put(ctx, "waited", []byte("v"), time.Time{}) }()
	<-begun // the writer is busy with the waited change's batch
	if err := db.NoWait().Put(ctx, "unwaited", []byte("v"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := len(db.j.kick); n != 0 {
		t.Errorf("after a NoWait Put, %d writes asked for; want 0", n)
	}
	tk := db.j.barrier() // the open batch, which holds the NoWait change
	// A batch that has grown to batchFull is written all the same.
	if err := db.NoWait().Put(ctx, "big", make([]byte, batchFull), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n := len(db.j.kick); n != 1 {
		t.Errorf("after NoWait Puts of %d bytes, %d writes asked for; want 1", batchFull, n)
	}
	close(open)
	must(t, <-first)
	select {
	case <-tk.b.done:
		must(t, tk.b.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the NoWait change was not written within 10s; want within %v", writeEvery)
	}
	db.abandon()
	db = openT(t, dir, Options{})
	defer db.Close()
	if _, err := db.Get(ctx, "unwaited"); err != nil {
		t.Errorf("Get(%q) after its write and a crash = %v", "unwaited", err)
	}
}
