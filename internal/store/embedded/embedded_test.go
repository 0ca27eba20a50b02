package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/storetest"
)

// abandon stops db as kill -9 would: nothing more is written for it,
// no snapshot, no final flush of what was not yet written.
func (db *DB) abandon() {
	db.closed.Store(true)
	if db.j != nil {
		db.j.mu.Lock()
		db.j.shut = true
		db.j.cur = newBatch(nil) // unwritten records die with the process
		db.j.mu.Unlock()
	}
	close(db.stop)
	if db.j != nil {
		<-db.j.done
		db.j.folds.Wait()
		db.j.f.Close()
	}
	db.bg.Wait()
}

func backend(d Durability, o Options) storetest.Backend {
	open := func(t *testing.T, dir string, c *storetest.Clock) store.Store {
		o := o
		o.Durability, o.Now = d, c.Now
		if o.Logger == nil {
			o.Logger = slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
		}
		db, err := Open(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	dirs := map[store.Store]string{}
	return storetest.Backend{
		Open: func(t *testing.T, c *storetest.Clock) store.Store {
			dir := t.TempDir()
			s := open(t, dir, c)
			dirs[s] = dir
			return s
		},
		Restart: func(t *testing.T, s store.Store, c *storetest.Clock, crash bool) store.Store {
			if crash {
				s.(*DB).abandon()
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := open(t, dirs[s], c)
			dirs[s2] = dirs[s]
			return s2
		},
		Durable: d == Fsync,
	}
}

func TestContract(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Durability
		o    Options
	}{
		{"fsync", Fsync, Options{}},
		{"interval", Interval, Options{}},
		{"fsync/fold-often", Fsync, Options{FoldAt: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) { storetest.Run(t, backend(tc.d, tc.o)) })
	}
}

func openT(t *testing.T, dir string, o Options) *DB {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	return db
}

func lastJournal(t *testing.T, dir string) string {
	t.Helper()
	files, err := listFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(files) - 1; i >= 0; i-- {
		if !files[i].snap {
			return filepath.Join(dir, files[i].name)
		}
	}
	t.Fatal("no journal")
	return ""
}

// crashed writes n values with db, one after another, abandons it, and
// returns the journal the values are in, cut after its records (without
// the zeros it is filled with ahead of them). Each value is a batch of its
// own: a batch header, then the value's record.
func crashed(t *testing.T, dir string, n int) string {
	db := openT(t, dir, Options{})
	for i := range n {
		if err := db.Put(context.Background(), fmt.Sprint("k", i), []byte("value"), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	db.abandon()
	path := lastJournal(t, dir)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := headerSize + n*(batchHeaderSize+recordLen(nil))
	if !allZero(b[end:]) {
		t.Fatalf("%s holds more than %d records", path, n)
	}
	must(t, os.WriteFile(path, b[:end], 0o600))
	return path
}

func TestTornTailDropped(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(b []byte) []byte
		keep int // of the three values written
	}{
		{"cut in the last record", func(b []byte) []byte { return b[:len(b)-3] }, 2},
		{"cut in the last frame", func(b []byte) []byte { return b[:len(b)-recordLen(b)+4] }, 2},
		{"zeros after the records", func(b []byte) []byte { return append(b, make([]byte, 4096)...) }, 3},
		{"last record's checksum wrong", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := crashed(t, dir, 3)
			b, _ := os.ReadFile(path)
			if err := os.WriteFile(path, tc.tear(b), 0o600); err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			db := openT(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			defer db.Close()
			if got := db.Len(); got != tc.keep {
				t.Errorf("after the tear, %d entries; want %d", got, tc.keep)
			}
			if warned := strings.Contains(logged.String(), "level=WARN"); warned != (tc.keep == 2) {
				t.Errorf("warned %v of the end (a torn tail: %v); log: %s", warned, tc.keep == 2, logged.String())
			}
		})
	}
}

// recordLen returns the framed length of the last of the records written
// by crashed (they all have one size).
func recordLen(b []byte) int {
	return len(appendRecord(nil, record{op: opPut, key: "k0", val: []byte("value")}))
}

func TestDamageStopsStart(t *testing.T) {
	dir := t.TempDir()
	path := crashed(t, dir, 3)
	b, _ := os.ReadFile(path)
	second := headerSize + batchHeaderSize + recordLen(b) + batchHeaderSize // of three records
	b[second+frameSize+2] ^= 0x40
	os.WriteFile(path, b, 0o600)
	_, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	want := fmt.Sprintf("%s is damaged at offset %d", path, second)
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open(damaged) = %v; want one line with %q", err, want)
	}
}

func TestMissingJournalStopsStart(t *testing.T) {
	dir := t.TempDir()
	crashed(t, dir, 1)
	crashed(t, dir, 1) // a second journal after the first
	os.Remove(filepath.Join(dir, journalName(1)))
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), journalName(1)+" is missing") {
		t.Fatalf("Open without journal 1 = %v; want it named missing", err)
	}
}

func TestSnapshotCutShortStopsStart(t *testing.T) {
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	big := bytes.Repeat([]byte("v"), 1<<20)
	for i := range closeFoldAt>>20 + 1 { // a journal Close folds into a snapshot
		must(t, db.Put(context.Background(), fmt.Sprint("k", i), big, time.Time{}))
	}
	must(t, db.Close())
	path := filepath.Join(dir, snapName(2))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, b[:len(b)-1], 0o600)
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), path+" is damaged") {
		t.Fatalf("Open(snapshot cut short) = %v; want it named damaged", err)
	}
}

// failingFile is a journal file whose writes fail while fail is set.
type failingFile struct {
	file
	fail *atomic.Bool
}

func (f failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fail.Load() {
		return 0, errors.New("no space left on device")
	}
	return f.file.WriteAt(p, off)
}

// failWrites makes db's journal writes fail until the returned flag is
// cleared. The writer is idle between the test's own calls.
func failWrites(db *DB) *atomic.Bool {
	var fail atomic.Bool
	fail.Store(true)
	db.j.mu.Lock()
	db.j.f = failingFile{db.j.f, &fail}
	db.j.mu.Unlock()
	return &fail
}

func TestFailedWriteAcknowledgesNothingAndRecovers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	must(t, db.Put(ctx, "before", []byte("v"), time.Time{}))
	fail := failWrites(db)

	if err := db.Put(ctx, "lost", []byte("v"), time.Time{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Put while writes fail = %v; want ErrUnavailable", err)
	}
	if err := db.Put(ctx, "refused", []byte("v"), time.Time{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Put after a failed write = %v; want ErrUnavailable", err)
	}
	if _, err := db.Get(ctx, "refused"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused Put was made: Get = %v", err)
	}
	if v, err := db.Get(ctx, "before"); err != nil || string(v) != "v" {
		t.Fatalf("reads while writes fail: Get = %q, %v", v, err)
	}
	fail.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for db.Failing() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the store did not recover once writes worked again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, db.Put(ctx, "after", []byte("v"), time.Time{}))
	db.abandon()
	db = openT(t, dir, Options{})
	defer db.Close()
	for _, k := range []string{"before", "after"} {
		if _, err := db.Get(ctx, k); err != nil {
			t.Errorf("Get(%q) after recovery and a crash = %v", k, err)
		}
	}
}

func TestMaxLive(t *testing.T) {
	ctx := context.Background()
	c := storetest.NewClock()
	db := openT(t, "", Options{MaxLive: 2, Now: c.Now})
	defer db.Close()
	must(t, db.Put(ctx, "a", nil, c.Now().Add(time.Second)))
	must(t, db.Put(ctx, "b", nil, time.Time{}))
	if err := db.Put(ctx, "c", nil, time.Time{}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("Put beyond MaxLive = %v; want ErrFull", err)
	}
	must(t, db.Put(ctx, "b", []byte("replaced"), time.Time{})) // not one more
	c.Advance(time.Second)
	db.Sweep()
	must(t, db.Put(ctx, "c", nil, time.Time{}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCloseRetries: a Close whose snapshot cannot be written (the journal
// failing, so memory holds what it may not) returns the error, and a
// later Close writes it; nothing acknowledged or changed is lost.
func TestCloseRetries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	must(t, db.Put(ctx, "acknowledged", []byte("v"), time.Time{}))
	failWrites(db)
	if err := db.Put(ctx, "refused", []byte("v"), time.Time{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Put while writes fail = %v; want ErrUnavailable", err)
	}
	blocker := filepath.Join(dir, snapName(db.j.gen+1))
	must(t, os.Mkdir(blocker, 0o700))
	if err := db.Close(); err == nil {
		t.Fatal("Close with its snapshot blocked = nil; want the error")
	}
	must(t, os.Remove(blocker))
	must(t, db.Close())
	db = openT(t, dir, Options{})
	defer db.Close()
	for _, k := range []string{"acknowledged", "refused"} { // refused, but made in memory: kept, as a 503 allows
		if _, err := db.Get(ctx, k); err != nil {
			t.Errorf("Get(%q) after the retried Close = %v", k, err)
		}
	}
}

// stalledFile holds the journal's writes until open is closed, and closes
// begun when the first one begins: a write under way.
type stalledFile struct {
	file
	begun, open chan struct{}
	once        *sync.Once
}

func (f stalledFile) WriteAt(p []byte, off int64) (int, error) {
	f.once.Do(func() { close(f.begun) })
	<-f.open
	return f.file.WriteAt(p, off)
}

// stall holds db's journal writes from now until open is closed; begun
// closes when the first has begun. The writer is idle when it is called.
func stall(db *DB) (begun, open chan struct{}) {
	begun, open = make(chan struct{}), make(chan struct{})
	db.j.mu.Lock()
	db.j.f = stalledFile{file: db.j.f, begun: begun, open: open, once: new(sync.Once)}
	db.j.mu.Unlock()
	return begun, open
}

// TestUnchangedWaitsForTheChangeBefore: a change that finds nothing to do,
// because a change not yet on disk did it, is told only once that change
// is on disk: a power cut before would bring back what it was answered as
// done (a key deleted, a member removed).
func TestUnchangedWaitsForTheChangeBefore(t *testing.T) {
	ctx := context.Background()
	del := func(entry, bool) (entry, bool, error) { return entry{}, true, nil }
	for _, tc := range []struct {
		name  string
		setup func(db *DB) error
		first func(db *DB) error           // its write is held
		then  func(db *DB) (ticket, error) // finds nothing to do
	}{
		{"a delete after a take",
			func(db *DB) error { return db.Put(ctx, "code", []byte("v"), time.Time{}) },
			func(db *DB) error { _, err := db.Take(ctx, "code"); return err },
			func(db *DB) (ticket, error) { _, tk, err := db.changeLocked("code", del); return tk, err }},
		{"a removal after a removal",
			func(db *DB) error { return db.ZAdd(ctx, "q", "item", 1) },
			func(db *DB) error { return db.ZRem(ctx, "q", "item") },
			func(db *DB) (ticket, error) { return db.setChange("q", "item", false, 0) }},
		{"an add after the same add",
			func(db *DB) error { return nil },
			func(db *DB) error { return db.ZAdd(ctx, "q", "item", 1) },
			func(db *DB) (ticket, error) { return db.setChange("q", "item", true, 1) }},
		{"a sync while a batch is written",
			func(db *DB) error { return nil },
			func(db *DB) error { return db.Put(ctx, "k", []byte("v"), time.Time{}) },
			func(db *DB) (ticket, error) { return db.j.barrier(), nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openT(t, t.TempDir(), Options{})
			defer db.Close()
			must(t, tc.setup(db))
			begun, open := stall(db)
			first := make(chan error, 1)
			go func() { first <- tc.first(db) }()
			<-begun // the first change is in memory, its record being written
			tk, err := tc.then(db)
			must(t, err)
			if tk.b == nil {
				close(open)
				t.Fatal("told at once, before the change it follows is on disk")
			}
			select {
			case <-tk.b.done:
				t.Fatal("told before the change it follows is on disk")
			default:
			}
			close(open)
			<-tk.b.done
			must(t, tk.b.err)
			must(t, <-first)
		})
	}
}

// TestTornMiddleOfLastBatch: a crash in the write of a batch of several
// pages may keep a later page and lose an earlier one (the kernel writes
// pages back in no set order); the start drops the batch from the lost
// page on, which nothing had been told of, and keeps what was.
func TestTornMiddleOfLastBatch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openT(t, dir, Options{})
	must(t, db.Put(ctx, "acked", []byte("v"), time.Time{}))
	big := bytes.Repeat([]byte("x"), 3000)
	must(t, db.Apply(ctx, []store.Write{{Key: "u1", Val: big}, {Key: "u2", Val: big}, {Key: "u3", Val: big}}))
	db.abandon()
	path := lastJournal(t, dir)
	b, err := os.ReadFile(path)
	must(t, err)
	clear(b[4096:8192]) // page 1, inside the batch of u1-u3, never reached the disk
	must(t, os.WriteFile(path, b, 0o600))
	var logged bytes.Buffer
	db = openT(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	defer db.Close()
	for k, want := range map[string]bool{"acked": true, "u1": true, "u2": false, "u3": false} {
		if _, err := db.Get(ctx, k); (err == nil) != want {
			t.Errorf("Get(%q) after the torn batch = %v; want it there: %v", k, err, want)
		}
	}
	if !strings.Contains(logged.String(), "cut short by a crash") {
		t.Errorf("no warning of the torn batch; log: %s", logged.String())
	}
}

// TestCloseTwiceAtOnce: Close may be called from two goroutines (run with
// -race).
func TestCloseTwiceAtOnce(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	must(t, db.Put(context.Background(), "k", []byte("v"), time.Time{}))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { db.Close() })
	}
	wg.Wait()
}
