//go:build !wasip1

package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/redisstore/redistest"
	"deeplink/internal/store/storetest"
)

var (
	ctx   = context.Background()
	quiet = slog.New(slog.DiscardHandler)
)

// openStore opens a store on sv under prefix and closes it when the test
// ends.
func openStore(t testing.TB, sv *redistest.Server, o Options) *Store {
	t.Helper()
	o.URL = sv.URL()
	if o.Logger == nil {
		o.Logger = quiet
	}
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open(%q) = %v", o.URL, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backend runs the contract's suite on one server, each store under a
// prefix of its own. The suite's clock is the store's Now; when the
// suite moves it, the test moves the TTLs of the store's keys on Redis
// by as much (Redis's own clock cannot be set).
func backend(sv *redistest.Server) storetest.Backend {
	var n atomic.Int64
	prefixes := map[store.Store]string{}
	open := func(t *testing.T, prefix string, c *storetest.Clock) store.Store {
		s, err := Open(Options{URL: sv.URL(), Prefix: prefix, Now: c.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		prefixes[s] = prefix
		return s
	}
	return storetest.Backend{
		Open: func(t *testing.T, c *storetest.Clock) store.Store {
			prefix := fmt.Sprintf("test%d:", n.Add(1))
			c.OnAdvance(func(d time.Duration) { sv.Advance(t, prefix, d) })
			return open(t, prefix, c)
		},
		Restart: func(t *testing.T, s store.Store, c *storetest.Clock, crash bool) store.Store {
			if crash {
				sv.Restart(t, syscall.SIGKILL)
			} else {
				s.Close()
				sv.Restart(t, syscall.SIGTERM)
			}
			s.Close() // after a crash: only its dead connections are left to release
			return open(t, prefixes[s], c)
		},
		Durable: true, // appendfsync always
	}
}

func TestContract(t *testing.T) {
	storetest.Run(t, backend(redistest.New(t, redistest.Persistent...)))
}

// TestUnavailable stops Redis under a store: every method fails with
// ErrUnavailable within the timeouts, and once Redis is back the same
// store works again by itself.
func TestUnavailable(t *testing.T) {
	const timeout = 300 * time.Millisecond
	// A call on a connection it has to make first waits out the dial, then
	// the handshake's answer, then its own: at most three timeouts.
	const within = 3*timeout + 500*time.Millisecond
	ops := []struct {
		name string
		call func(s *Store) error
	}{
		{"Get", func(s *Store) error { _, err := s.Get(ctx, "k"); return err }},
		{"Put", func(s *Store) error { return s.Put(ctx, "k", []byte("v"), time.Time{}) }},
		{"Insert", func(s *Store) error { return s.Insert(ctx, "new", []byte("v"), time.Time{}) }},
		{"Take", func(s *Store) error { _, err := s.Take(ctx, "k"); return err }},
		{"CompareAndSwap", func(s *Store) error { return s.CompareAndSwap(ctx, "k", nil, []byte("v"), time.Time{}) }},
		{"Add", func(s *Store) error { _, err := s.Add(ctx, "n", 1, time.Time{}); return err }},
		{"ZClaim", func(s *Store) error { _, err := s.ZClaim(ctx, "q", 10, 20, 0); return err }},
		{"Apply", func(s *Store) error { return s.Apply(ctx, []store.Write{{Key: "a", Val: []byte("1")}}) }},
		{"Ping", func(s *Store) error { return s.Ping(ctx) }},
	}
	for _, tc := range []struct {
		name         string
		stop, resume func(t *testing.T, sv *redistest.Server)
		logged       string // what the client logs of it
	}{
		{"killed", func(t *testing.T, sv *redistest.Server) { sv.Stop(t, syscall.SIGKILL) }, func(t *testing.T, sv *redistest.Server) {
			if err := sv.Start(); err != nil {
				t.Fatal(err)
			}
		}, "connection refused"},
		{"frozen", func(t *testing.T, sv *redistest.Server) { sv.Signal(syscall.SIGSTOP) }, func(t *testing.T, sv *redistest.Server) {
			sv.Signal(syscall.SIGCONT)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sv := redistest.New(t, redistest.Persistent...)
			var log syncBuffer
			s := openStore(t, sv, Options{
				DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
				Logger: slog.New(slog.NewTextHandler(&log, nil)),
			})
			if err := s.Put(ctx, "before", []byte("v"), time.Time{}); err != nil {
				t.Fatal(err)
			}
			tc.stop(t, sv)
			for _, op := range ops {
				start := time.Now()
				err := op.call(s)
				if took := time.Since(start); !errors.Is(err, store.ErrUnavailable) || took > within {
					t.Errorf("%s with Redis %s = %v after %v; want ErrUnavailable within %v", op.name, tc.name, err, took, within)
				}
			}
			tc.resume(t, sv)
			// The pool finds out by itself that Redis is back: a call may
			// still fail while it does (its probe runs once a second).
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := s.Put(ctx, "after", []byte("v"), time.Time{})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Put 10 s after Redis came back = %v; want nil", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for _, op := range ops {
				if err := op.call(s); errors.Is(err, store.ErrUnavailable) {
					t.Errorf("%s after Redis came back = %v; want it served", op.name, err)
				}
			}
			if got, err := s.Get(ctx, "before"); err != nil || string(got) != "v" {
				t.Errorf("Get(%q) after Redis came back = %q, %v; want %q", "before", got, err, "v")
			}
			if !strings.Contains(log.String(), tc.logged) {
				t.Errorf("the store's log = %q; want it to mention %q", log.String(), tc.logged)
			}
		})
	}
}

// syncBuffer is a buffer that a logger may write while a test reads it.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestDeadline: a caller's deadline shorter than the read timeout is the
// one that counts.
func TestDeadline(t *testing.T) {
	sv := redistest.New(t)
	s := openStore(t, sv, Options{})
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	sv.Signal(syscall.SIGSTOP)
	defer sv.Signal(syscall.SIGCONT)
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Get(c, "k")
	if took := time.Since(start); !errors.Is(err, store.ErrUnavailable) || took > time.Second {
		t.Errorf("Get with a 100 ms deadline on a frozen Redis = %v after %v; want ErrUnavailable before the %v read timeout", err, took, DefaultReadTimeout)
	}
}

// TestKeys: every key is under the prefix, an entry and a set may share
// a name, and expiries are Redis TTLs.
func TestKeys(t *testing.T) {
	sv := redistest.New(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) // any clock: only exp − now reaches Redis
	s := openStore(t, sv, Options{Prefix: "app:", Now: func() time.Time { return now }})
	other := openStore(t, sv, Options{Prefix: "other:"})
	for _, err := range []error{
		s.Put(ctx, "q", []byte("entry"), now.Add(time.Minute)),
		s.ZAdd(ctx, "q", "member", 1),
		s.Put(ctx, "forever", []byte("v"), time.Time{}),
		other.Put(ctx, "q", []byte("other's"), time.Time{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Add(ctx, "n", 1, now.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("Add = %d, %v; want 1", n, err)
	}
	if got, err := s.Get(ctx, "q"); err != nil || string(got) != "entry" {
		t.Errorf("Get(%q) = %q, %v; want %q", "q", got, err, "entry")
	}
	if got, err := s.ZRange(ctx, "q", 0, 10, 0, false); err != nil || len(got) != 1 || got[0].Member != "member" {
		t.Errorf("ZRange(%q) = %v, %v; want member", "q", got, err)
	}
	keys, err := sv.Admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "app:") && !strings.HasPrefix(k, "other:") {
			t.Errorf("key %q is under neither prefix", k)
		}
	}
	for _, tc := range []struct {
		key      string
		min, max time.Duration
	}{
		{"app:k:q", 59 * time.Second, time.Minute},
		{"app:k:n", 59 * time.Minute, time.Hour},
		{"app:k:forever", -1, -1},
		{"app:z:q", -1, -1},
		{"other:k:q", -1, -1},
	} {
		ttl, err := sv.Admin.PTTL(ctx, tc.key).Result()
		if err != nil || ttl < tc.min || ttl > tc.max {
			t.Errorf("PTTL(%q) = %v, %v; want %v to %v", tc.key, ttl, err, tc.min, tc.max)
		}
	}
}

// TestScores: Redis keeps scores as doubles, so scores past ±2^53 are
// refused rather than rounded, while ranges may still use any int64.
func TestScores(t *testing.T) {
	sv := redistest.New(t)
	s := openStore(t, sv, Options{})
	for _, tc := range []struct {
		score int64
		ok    bool
	}{
		{1 << 53, true},
		{-1 << 53, true},
		{1<<53 + 1, false},
		{math.MinInt64, false},
		{1_800_000_000_000, true}, // Unix milliseconds
	} {
		err := s.ZAdd(ctx, "z", fmt.Sprint(tc.score), tc.score)
		if (err == nil) != tc.ok {
			t.Errorf("ZAdd(score %d) = %v; want ok: %v", tc.score, err, tc.ok)
		}
	}
	got, err := s.ZRange(ctx, "z", math.MinInt64, math.MaxInt64, 0, false)
	if err != nil || len(got) != 3 || got[0].Score != -1<<53 || got[2].Score != 1<<53 {
		t.Errorf("ZRange(MinInt64, MaxInt64) = %v, %v; want the three scores from -2^53 to 2^53", got, err)
	}
	if _, err := s.ZClaim(ctx, "z", 0, 1<<60, 0); err == nil {
		t.Errorf("ZClaim(until 2^60) = nil; want an error")
	}
	claimed, err := s.ZClaim(ctx, "z", math.MaxInt64, 5, 0)
	if err != nil || len(claimed) != 3 || claimed[2].Score != 1<<53 {
		t.Errorf("ZClaim(due MaxInt64) = %v, %v; want all three with their scores", claimed, err)
	}
}

// TestFull: Redis over its maxmemory refuses a write, and that is the
// contract's ErrFull; deleting still works and makes room.
func TestFull(t *testing.T) {
	sv := redistest.New(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	s := openStore(t, sv, Options{})
	big := make([]byte, 256<<10)
	var err error
	n := 0
	for ; n < 100 && err == nil; n++ {
		err = s.Put(ctx, fmt.Sprint(n), big, time.Time{})
	}
	if !errors.Is(err, store.ErrFull) {
		t.Fatalf("Put of 256 KiB values, the %dth = %v; want ErrFull", n, err)
	}
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"Insert", func() error { return s.Insert(ctx, "new", big, time.Time{}) }},
		{"CompareAndSwap", func() error { return s.CompareAndSwap(ctx, "new", nil, big, time.Time{}) }},
		{"Apply", func() error { return s.Apply(ctx, []store.Write{{Key: "new", Val: big}}) }},
	} {
		if err := op.call(); !errors.Is(err, store.ErrFull) {
			t.Errorf("%s over maxmemory = %v; want ErrFull", op.name, err)
		}
	}
	for i := range n {
		if err := s.Delete(ctx, fmt.Sprint(i)); err != nil {
			t.Fatalf("Delete over maxmemory = %v; want nil", err)
		}
	}
	if err := s.Put(ctx, "new", big, time.Time{}); err != nil {
		t.Errorf("Put after the deletes = %v; want nil", err)
	}
}

func TestVersionError(t *testing.T) {
	for _, tc := range []struct {
		info string
		ok   bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", true},
		{"redis_version:6.2.0\r\n", true},
		{"redis_version:10.0.0\r\n", true},
		{"redis_version:6.0.16\r\n", false},
		{"redis_version:5.0.7\r\n", false},
		{"# Server\r\nserver_name:something\r\n", true},
	} {
		if err := versionError(tc.info); (err == nil) != tc.ok {
			t.Errorf("versionError(%q) = %v; want ok: %v", tc.info, err, tc.ok)
		}
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := Open(Options{URL: "http://127.0.0.1:6379"}); err == nil {
		t.Errorf("Open(http URL) = nil; want an error")
	}
}

// serverError is an error answer of a Redis server, as go-redis gives it.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

func TestUnavailableAnswers(t *testing.T) {
	for _, tc := range []struct {
		answer string
		want   bool
	}{
		{"LOADING Redis is loading the dataset in memory", true},
		{"BUSY Redis is busy running a script", true},
		{"ERR max number of clients reached", true},
		{"ERR unknown command 'FOO'", false},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
	} {
		if got := unavailable(serverError(tc.answer)); got != tc.want {
			t.Errorf("unavailable(%q) = %v; want %v", tc.answer, got, tc.want)
		}
	}
}
