// Package storetest checks that a backend keeps the contract of
// store.Store. A backend's own test calls Run with a Backend; the same
// table runs against every backend.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"deeplink/internal/store"
)

// Clock is the time the store under test takes as now. It starts at a
// fixed moment and moves only when a test advances it.
type Clock struct {
	mu    sync.Mutex // guards t and moved
	t     time.Time
	moved []func(d time.Duration)
}

func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d, then calls what OnAdvance registered.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	moved := c.moved
	c.mu.Unlock()
	for _, f := range moved {
		f(d)
	}
}

// OnAdvance makes every later Advance call f with how far the clock
// moved. It is for a backend whose entries expire by a clock the test
// cannot move, a server's: its test moves the entries' expiries instead,
// each d sooner, so that for the suite time has passed all the same.
func (c *Clock) OnAdvance(f func(d time.Duration)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.moved = append(c.moved, f)
}

// Backend is what Run needs of a backend.
type Backend struct {
	// Open returns a store on fresh, empty state that takes clock's time
	// as now. Run closes it.
	Open func(t *testing.T, clock *Clock) store.Store
	// Restart stops s and returns a store on the same state. With crash,
	// s is abandoned as by kill -9: nothing more is written for it.
	Restart func(t *testing.T, s store.Store, clock *Clock, crash bool) store.Store
	// Durable says that every acknowledged change survives a crash.
	Durable bool
}

type test struct {
	name string
	run  func(t *testing.T, b Backend)
}

// Run runs the contract's tests against b.
func Run(t *testing.T, b Backend) {
	for _, tt := range slices.Concat(tests, applyTests) {
		if tt.name == "Crash" && !b.Durable {
			continue // the backend promises nothing across a crash
		}
		t.Run(tt.name, func(t *testing.T) { tt.run(t, b) })
	}
}

var ctx = context.Background()

// open opens a store for one test and closes it when the test ends.
func open(t *testing.T, b Backend) (store.Store, *Clock) {
	c := NewClock()
	s := b.Open(t, c)
	t.Cleanup(func() { s.Close() })
	return s, c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantValue(t *testing.T, s store.Store, key, want string) {
	t.Helper()
	got, err := s.Get(ctx, key)
	if err != nil || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, got, err, want)
	}
}

func wantGone(t *testing.T, s store.Store, key string) {
	t.Helper()
	if got, err := s.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%q) = %q, %v; want ErrNotFound", key, got, err)
	}
}

// race runs f on n goroutines at once and returns how many returned nil.
func race(n int, f func(i int) error) (ok int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if f(i) == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok
}

var tests = []test{
	{"GetMissing", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		_, err := s.Get(ctx, "nothing")
		if !errors.Is(err, store.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Get(missing) = %v; want ErrNotFound (fs.ErrNotExist)", err)
		}
	}},
	{"PutCopiesInAndOut", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		v := []byte("value")
		must(t, s.Put(ctx, "k", v, time.Time{}))
		v[0] = 'X'
		got, err := s.Get(ctx, "k")
		must(t, err)
		got[0] = 'Y'
		wantValue(t, s, "k", "value")
	}},
	{"BinaryKeysAndEmptyValues", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		k := "\x00\xff key\n"
		must(t, s.Put(ctx, k, nil, time.Time{}))
		wantValue(t, s, k, "")
		must(t, s.Put(ctx, k+"2", []byte{0, 1, 2}, time.Time{}))
		wantValue(t, s, k+"2", "\x00\x01\x02")
	}},
	{"Expiry", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.Put(ctx, "k", []byte("v"), c.Now().Add(time.Minute)))
		must(t, s.Put(ctx, "forever", []byte("v"), time.Time{}))
		c.Advance(59 * time.Second)
		wantValue(t, s, "k", "v")
		c.Advance(time.Second)
		wantGone(t, s, "k")
		if _, err := s.Swap(ctx, "k", []byte("w"), time.Time{}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Swap(expired) = %v; want ErrNotFound", err)
		}
		if _, err := s.Take(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Take(expired) = %v; want ErrNotFound", err)
		}
		must(t, s.Insert(ctx, "k", []byte("again"), c.Now().Add(time.Minute)))
		wantValue(t, s, "k", "again")
		c.Advance(1000 * time.Hour)
		wantValue(t, s, "forever", "v")
	}},
	{"Insert", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.Insert(ctx, "k", []byte("first"), c.Now().Add(time.Minute)))
		if err := s.Insert(ctx, "k", []byte("second"), c.Now().Add(time.Hour)); !errors.Is(err, store.ErrExists) {
			t.Fatalf("Insert(live key) = %v; want ErrExists", err)
		}
		c.Advance(time.Minute)
		wantGone(t, s, "k") // the refused Insert did not extend it
	}},
	{"InsertRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		n := race(50, func(i int) error { return s.Insert(ctx, "k", []byte(strconv.Itoa(i)), time.Time{}) })
		if n != 1 {
			t.Fatalf("%d of 50 concurrent Inserts succeeded; want 1", n)
		}
	}},
	{"Swap", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		if _, err := s.Swap(ctx, "k", []byte("v"), time.Time{}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Swap(missing) = %v; want ErrNotFound", err)
		}
		wantGone(t, s, "k")
		must(t, s.Put(ctx, "k", []byte("one"), c.Now().Add(time.Minute)))
		old, err := s.Swap(ctx, "k", []byte("two"), time.Time{})
		if err != nil || string(old) != "one" {
			t.Fatalf("Swap = %q, %v; want \"one\"", old, err)
		}
		c.Advance(59 * time.Second)
		wantValue(t, s, "k", "two")
		old, err = s.Swap(ctx, "k", []byte("three"), c.Now().Add(time.Hour))
		if err != nil || string(old) != "two" {
			t.Fatalf("Swap = %q, %v; want \"two\"", old, err)
		}
		c.Advance(time.Minute)
		wantValue(t, s, "k", "three") // the expiry moved
	}},
	{"SwapRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Put(ctx, "k", []byte("original"), time.Time{}))
		var mu sync.Mutex
		seen := map[string]int{}
		race(50, func(i int) error {
			old, err := s.Swap(ctx, "k", []byte(strconv.Itoa(i)), time.Time{})
			mu.Lock()
			seen[string(old)]++
			mu.Unlock()
			return err
		})
		for v, n := range seen {
			if n != 1 {
				t.Errorf("%d concurrent Swaps saw %q; want each value seen once", n, v)
			}
		}
		if seen["original"] != 1 {
			t.Errorf("the original value was seen %d times; want 1", seen["original"])
		}
	}},
	{"Extend", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		if err := s.Extend(ctx, "k", c.Now().Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Extend(missing) = %v; want ErrNotFound", err)
		}
		must(t, s.Put(ctx, "k", []byte("v"), c.Now().Add(time.Minute)))
		must(t, s.Extend(ctx, "k", c.Now().Add(time.Second))) // earlier: kept
		c.Advance(59 * time.Second)
		wantValue(t, s, "k", "v")
		must(t, s.Extend(ctx, "k", c.Now().Add(time.Minute)))
		c.Advance(59 * time.Second)
		wantValue(t, s, "k", "v")
		must(t, s.Extend(ctx, "k", time.Time{}))
		c.Advance(1000 * time.Hour)
		wantValue(t, s, "k", "v")
	}},
	{"Take", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Put(ctx, "k", []byte("v"), time.Time{}))
		got, err := s.Take(ctx, "k")
		if err != nil || string(got) != "v" {
			t.Fatalf("Take = %q, %v; want \"v\"", got, err)
		}
		wantGone(t, s, "k")
		if _, err := s.Take(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second Take = %v; want ErrNotFound", err)
		}
	}},
	{"TakeRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Put(ctx, "k", []byte("v"), time.Time{}))
		if n := race(50, func(int) error { _, err := s.Take(ctx, "k"); return err }); n != 1 {
			t.Fatalf("%d of 50 concurrent Takes got the value; want 1", n)
		}
	}},
	{"CompareAndSwap", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.CompareAndSwap(ctx, "k", nil, []byte("a"), time.Time{}))
		if err := s.CompareAndSwap(ctx, "k", nil, []byte("b"), time.Time{}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("CAS(absent) on a live key = %v; want ErrConflict", err)
		}
		if err := s.CompareAndSwap(ctx, "k", []byte("x"), []byte("b"), time.Time{}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("CAS(wrong old) = %v; want ErrConflict", err)
		}
		must(t, s.CompareAndSwap(ctx, "k", []byte("a"), []byte("b"), c.Now().Add(time.Minute)))
		wantValue(t, s, "k", "b")
		must(t, s.CompareAndSwap(ctx, "k", []byte("b"), []byte("b2"), time.Time{})) // keeps the minute
		c.Advance(59 * time.Second)
		wantValue(t, s, "k", "b2")
		c.Advance(time.Second)
		wantGone(t, s, "k")
		must(t, s.Put(ctx, "k", []byte("b"), time.Time{}))
		must(t, s.CompareAndSwap(ctx, "k", []byte("b"), nil, time.Time{}))
		wantGone(t, s, "k")
		if err := s.CompareAndSwap(ctx, "k", []byte("b"), []byte("c"), time.Time{}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("CAS(old) on a missing key = %v; want ErrConflict", err)
		}
	}},
	{"CompareAndSwapRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Put(ctx, "k", []byte("0"), time.Time{}))
		if n := race(50, func(i int) error {
			return s.CompareAndSwap(ctx, "k", []byte("0"), []byte(strconv.Itoa(i+1)), time.Time{})
		}); n != 1 {
			t.Fatalf("%d of 50 concurrent CompareAndSwaps succeeded; want 1", n)
		}
	}},
	{"Delete", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Delete(ctx, "nothing"))
		must(t, s.Put(ctx, "k", []byte("v"), time.Time{}))
		must(t, s.Delete(ctx, "k"))
		wantGone(t, s, "k")
	}},
	{"Add", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		n, err := s.Add(ctx, "n", 3, c.Now().Add(time.Minute))
		if err != nil || n != 3 {
			t.Fatalf("Add(new, 3) = %d, %v; want 3", n, err)
		}
		if n, err = s.Add(ctx, "n", -1, c.Now().Add(time.Hour)); err != nil || n != 2 {
			t.Fatalf("Add(-1) = %d, %v; want 2", n, err)
		}
		wantValue(t, s, "n", "2")
		c.Advance(time.Minute) // the first expiry holds
		wantGone(t, s, "n")
		if n, err = s.Add(ctx, "n", 1, time.Time{}); err != nil || n != 1 {
			t.Fatalf("Add(expired, 1) = %d, %v; want 1", n, err)
		}
	}},
	{"AddRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		race(50, func(int) error { _, err := s.Add(ctx, "n", 2, time.Time{}); return err })
		wantValue(t, s, "n", "100")
	}},
	{"ZRange", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		for _, m := range []struct {
			Member string
			Score  int64
		}{{"c", 3}, {"a", 1}, {"b", 2}, {"b2", 2}, {"d", 4}} {
			must(t, s.ZAdd(ctx, "z", m.Member, m.Score))
		}
		must(t, s.ZAdd(ctx, "z", "d", 0)) // moved
		for _, tc := range []struct {
			min, max int64
			limit    int
			rev      bool
			want     string
		}{
			{0, 10, 0, false, "d0 a1 b2 b22 c3"},
			{0, 10, 0, true, "c3 b22 b2 a1 d0"},
			{2, 2, 0, false, "b2 b22"},
			{1, 3, 2, false, "a1 b2"},
			{1, 3, 2, true, "c3 b22"},
			{5, 9, 0, false, ""},
			{3, 1, 0, false, ""},
		} {
			got, err := s.ZRange(ctx, "z", tc.min, tc.max, tc.limit, tc.rev)
			if err != nil || scoredString(got) != tc.want {
				t.Errorf("ZRange(%d, %d, %d, %v) = %q, %v; want %q", tc.min, tc.max, tc.limit, tc.rev, scoredString(got), err, tc.want)
			}
		}
		must(t, s.ZRem(ctx, "z", "b"))
		must(t, s.ZRem(ctx, "z", "nothing"))
		must(t, s.ZRem(ctx, "no set", "b"))
		got, err := s.ZRange(ctx, "z", 0, 10, 0, false)
		if err != nil || scoredString(got) != "d0 a1 b22 c3" {
			t.Errorf("after ZRem: %q, %v", scoredString(got), err)
		}
		if got, err := s.ZRange(ctx, "other", 0, 10, 0, false); err != nil || len(got) != 0 {
			t.Errorf("ZRange(missing set) = %v, %v; want nothing", got, err)
		}
	}},
	{"ZClaim", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		for i := range 5 {
			must(t, s.ZAdd(ctx, "q", "job"+strconv.Itoa(i), int64(10*i)))
		}
		got, err := s.ZClaim(ctx, "q", 25, 100, 0)
		if err != nil || scoredString(got) != "job00 job110 job220" {
			t.Fatalf("ZClaim(due 25) = %q, %v; want job0..2 with their scores", scoredString(got), err)
		}
		got, err = s.ZClaim(ctx, "q", 50, 100, 1)
		if err != nil || scoredString(got) != "job330" {
			t.Fatalf("ZClaim(due 50, limit 1) = %q, %v; want job3", scoredString(got), err)
		}
		all, _ := s.ZRange(ctx, "q", 0, 1000, 0, false)
		if scoredString(all) != "job440 job0100 job1100 job2100 job3100" {
			t.Fatalf("after claims the set is %q", scoredString(all))
		}
		got, err = s.ZClaim(ctx, "q", 100, 200, 0) // leases run out
		if err != nil || len(got) != 5 {
			t.Fatalf("ZClaim after the leases = %q, %v; want all five", scoredString(got), err)
		}
	}},
	{"ZClaimRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		for i := range 100 {
			must(t, s.ZAdd(ctx, "q", fmt.Sprint(i), int64(i)))
		}
		var mu sync.Mutex
		claimed := map[string]int{}
		race(20, func(int) error {
			for {
				got, err := s.ZClaim(ctx, "q", 1000, 5000, 3)
				if err != nil || len(got) == 0 {
					return err
				}
				mu.Lock()
				for _, x := range got {
					claimed[x.Member]++
				}
				mu.Unlock()
			}
		})
		if len(claimed) != 100 {
			t.Errorf("%d members claimed; want 100", len(claimed))
		}
		for m, n := range claimed {
			if n != 1 {
				t.Errorf("member %q claimed %d times; want once", m, n)
			}
		}
	}},
	{"GetMany", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.Put(ctx, "a", []byte("1"), time.Time{}))
		must(t, s.Put(ctx, "empty", nil, time.Time{}))
		must(t, s.Put(ctx, "expiring", []byte("3"), c.Now().Add(time.Minute)))
		if _, err := s.Add(ctx, "n", 4, time.Time{}); err != nil {
			t.Fatal(err)
		}
		must(t, s.ZAdd(ctx, "set", "m", 1)) // a set is no entry
		for _, tc := range []struct {
			name    string
			advance time.Duration
			keys    []string
			want    []string // "<nil>" for none
		}{
			{"none", 0, nil, nil},
			{"all kinds", 0, []string{"a", "missing", "empty", "n", "set", "expiring", "a"}, []string{"1", "<nil>", "", "4", "<nil>", "3", "1"}},
			{"expired", time.Minute, []string{"expiring", "a"}, []string{"<nil>", "1"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c.Advance(tc.advance)
				got, err := s.GetMany(ctx, tc.keys)
				if err != nil || len(got) != len(tc.keys) {
					t.Fatalf("GetMany(%q) = %q, %v; want %q", tc.keys, got, err, tc.want)
				}
				for i, v := range got {
					s := string(v)
					if v == nil {
						s = "<nil>"
					}
					if s != tc.want[i] {
						t.Errorf("GetMany(%q)[%d] = %q; want %q", tc.keys, i, s, tc.want[i])
					}
				}
			})
		}
	}},
	{"Restart", func(t *testing.T, b Backend) { restart(t, b, false) }},
	{"Crash", func(t *testing.T, b Backend) { restart(t, b, true) }},
	{"Closed", func(t *testing.T, b Backend) {
		s := b.Open(t, NewClock())
		must(t, s.Close())
		if err := s.Put(ctx, "k", []byte("v"), time.Time{}); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Put after Close = %v; want ErrUnavailable", err)
		}
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Get after Close = %v; want ErrUnavailable", err)
		}
	}},
}

// restart makes one change of every kind, restarts the store, and checks
// that every change is there.
func restart(t *testing.T, b Backend, crash bool) {
	c := NewClock()
	s := b.Open(t, c)
	must(t, s.Put(ctx, "put", []byte("v"), time.Time{}))
	must(t, s.Put(ctx, "expiring", []byte("v"), c.Now().Add(time.Second)))
	must(t, s.Extend(ctx, "expiring", c.Now().Add(time.Minute)))
	must(t, s.Insert(ctx, "inserted", []byte("v"), c.Now().Add(time.Hour)))
	must(t, s.Put(ctx, "swapped", []byte("old"), time.Time{}))
	if _, err := s.Swap(ctx, "swapped", []byte("new"), time.Time{}); err != nil {
		t.Fatal(err)
	}
	must(t, s.Put(ctx, "taken", []byte("v"), time.Time{}))
	if _, err := s.Take(ctx, "taken"); err != nil {
		t.Fatal(err)
	}
	must(t, s.Put(ctx, "deleted", []byte("v"), time.Time{}))
	must(t, s.Delete(ctx, "deleted"))
	must(t, s.CompareAndSwap(ctx, "cas", nil, []byte("v"), time.Time{}))
	if _, err := s.Add(ctx, "n", 7, time.Time{}); err != nil {
		t.Fatal(err)
	}
	must(t, s.ZAdd(ctx, "z", "a", 1))
	must(t, s.ZAdd(ctx, "z", "b", 2))
	must(t, s.ZAdd(ctx, "z", "c", 3))
	must(t, s.ZRem(ctx, "z", "b"))
	if _, err := s.ZClaim(ctx, "z", 1, 50, 0); err != nil {
		t.Fatal(err)
	}
	must(t, s.Apply(ctx, []store.Write{{Key: "applied", Add: 9}}))
	big := bytes.Repeat([]byte("x"), 1<<20)
	must(t, s.Put(ctx, "big", big, time.Time{}))

	s = b.Restart(t, s, c, crash)
	t.Cleanup(func() { s.Close() })
	wantValue(t, s, "put", "v")
	wantValue(t, s, "inserted", "v")
	wantValue(t, s, "swapped", "new")
	wantGone(t, s, "taken")
	wantGone(t, s, "deleted")
	wantValue(t, s, "cas", "v")
	wantValue(t, s, "n", "7")
	wantValue(t, s, "applied", "9")
	if got, err := s.Get(ctx, "big"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("Get(big) after restart: %d bytes, %v; want the 1 MiB written", len(got), err)
	}
	got, err := s.ZRange(ctx, "z", 0, 100, 0, false)
	if err != nil || scoredString(got) != "c3 a50" {
		t.Errorf("ZRange after restart = %q, %v; want \"c3 a50\"", scoredString(got), err)
	}
	if err := s.Insert(ctx, "inserted", []byte("w"), time.Time{}); !errors.Is(err, store.ErrExists) {
		t.Errorf("Insert(inserted) after restart = %v; want ErrExists", err)
	}
	wantValue(t, s, "expiring", "v")
	c.Advance(time.Minute) // the expiry survived too
	wantGone(t, s, "expiring")
}

func scoredString(xs []store.Scored) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.Member + strconv.FormatInt(x.Score, 10)
	}
	return strings.Join(parts, " ")
}
