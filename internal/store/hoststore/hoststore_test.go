package hoststore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/store/storetest"
)

// wired is a Client whose calls go straight to Serve on an embedded
// store, as the host's would: the frames and both ends, without wasm.
// Like the host, it serves each call through a Deferred view of the
// store, and waits for the view's changes before it answers.
type wired struct {
	*Client
	db  *embedded.DB
	dir string
}

func openWired(t *testing.T, dir string, c *storetest.Clock) *wired {
	db, err := embedded.Open(dir, embedded.Options{Durability: embedded.Fsync, Now: c.Now,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := &wired{db: db, dir: dir}
	w.Client = NewClient(deferred(db, &Backend{Failing: db.Failing, Len: db.Len, Count: db.Count}))
	return w
}

// Close closes the backend, as the host does when it stops.
func (w *wired) Close() error { return w.db.Close() }

func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Open: func(t *testing.T, c *storetest.Clock) store.Store {
			return openWired(t, t.TempDir(), c)
		},
		Restart: func(t *testing.T, s store.Store, c *storetest.Clock, crash bool) store.Store {
			w := s.(*wired) // the embedded store's own tests crash it
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return openWired(t, w.dir, c)
		},
	})
}

func TestExtras(t *testing.T) {
	w := openWired(t, t.TempDir(), storetest.NewClock())
	defer w.Close()
	ctx := context.Background()
	for _, k := range []string{"code:a", "code:b", "tok:c"} {
		if err := w.Put(ctx, k, []byte{'c', 1}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Put(ctx, "code:d", []byte{'x'}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := w.Len(); got != 4 {
		t.Errorf("Len() = %d; want 4", got)
	}
	if got := w.Count("code:", 'c'); got != 2 {
		t.Errorf("Count(%q, 'c') = %d; want 2", "code:", got)
	}
	if err := w.Failing(); err != nil {
		t.Errorf("Failing() = %v; want nil", err)
	}
	// A backend that cannot count says so.
	none := NewClient(deferred(w.db, &Backend{}))
	if got := none.Len(); got != -1 {
		t.Errorf("Len() without counts = %d; want -1", got)
	}
}

// deferred is a Client's call answered by b on a Deferred view of db, as
// the host answers a module's: a failed wait turns the reply into
// statusUnavailable.
func deferred(db *embedded.DB, b *Backend) func([]byte) []byte {
	return func(req []byte) []byte {
		v := db.Defer()
		reply := b.Serve(context.Background(), v, req)
		if err := v.Wait(context.Background()); err != nil {
			e := &enc{b: []byte{statusUnavailable}}
			e.str(err.Error())
			return e.b
		}
		return reply
	}
}

// TestUnavailable checks that the backend's errors beyond the contract's
// reach the module as ErrUnavailable, with their text.
func TestUnavailable(t *testing.T) {
	w := openWired(t, t.TempDir(), storetest.NewClock())
	w.Close() // every call now fails
	err := w.Put(context.Background(), "k", []byte("v"), time.Time{})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("Put on a closed backend = %v; want ErrUnavailable", err)
	}
}

// FuzzServe feeds the host arbitrary frames, as a broken or hostile
// module could send: it must answer each with a reply frame the client
// reads, and never panic.
func FuzzServe(f *testing.F) {
	for _, seed := range seedFrames() {
		f.Add(seed)
	}
	db, err := embedded.Open(f.TempDir(), embedded.Options{Durability: embedded.Interval,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	b := &Backend{Failing: db.Failing, Len: db.Len, Count: db.Count}
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply := b.Serve(context.Background(), db, frame)
		if len(reply) == 0 || reply[0] > statusOther {
			t.Fatalf("Serve(%q) = %q; want a status byte first", frame, reply)
		}
	})
}

// seedFrames are a request of every kind, as the client encodes them.
func seedFrames() [][]byte {
	var frames [][]byte
	c := NewClient(func(req []byte) []byte {
		frames = append(frames, bytes.Clone(req))
		return []byte{statusOK}
	})
	ctx := context.Background()
	exp := time.Unix(1e9, 0)
	c.Get(ctx, "k")
	c.GetMany(ctx, []string{"k", "", "n"})
	c.Put(ctx, "k", []byte("v"), exp)
	c.Insert(ctx, "k", []byte("v"), time.Time{})
	c.Swap(ctx, "k", []byte("w"), exp)
	c.Extend(ctx, "k", exp)
	c.Take(ctx, "k")
	c.CompareAndSwap(ctx, "k", nil, []byte("v"), exp)
	c.Delete(ctx, "k")
	c.Add(ctx, "n", -3, exp)
	c.ZAdd(ctx, "z", "m", 7)
	c.ZRem(ctx, "z", "m")
	c.ZRange(ctx, "z", -1, 9, 2, true)
	c.ZClaim(ctx, "z", 5, 10, 3)
	c.Apply(ctx, []store.Write{{Key: "a", Val: []byte("1")}, {Key: "z", Member: "m", Score: 2}, {Key: "b"}, {Key: "n", Add: 4, Exp: exp}})
	c.Failing()
	c.Len()
	c.Count("code:", 'c')
	return frames
}
