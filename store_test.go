package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testKey returns a distinct key for name, the way the service derives its
// keys: a SHA-256.
func testKey(name string) Key { return sha256.Sum256([]byte(name)) }

// keyInShard returns a key for name that falls into shard i.
func keyInShard(name string, i int) Key {
	k := testKey(name)
	k[0] = byte(i)
	return k
}

// newTestStore returns a store with nothing on disk unless dir is given.
func newTestStore(t *testing.T, dir string, maxLive int) *memStore {
	t.Helper()
	s, err := newMemStore(dir, maxLive)
	require.NoError(t, err)
	return s
}

// fileSize returns the size of the file at path.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Size()
}

var (
	future = func() time.Time { return time.Now().Add(time.Hour) }
	past   = func() time.Time { return time.Now().Add(-time.Second) }
)

func TestMemStoreInsertGet(t *testing.T) {
	k := testKey("a")
	tests := []struct {
		name     string
		setup    func(s *memStore)
		val      string
		exp      func() time.Time
		wantErr  error
		wantLive bool   // whether Get(k) finds it afterwards
		wantVal  string // and the value it returns
	}{
		{
			name:     "new key",
			val:      "v1",
			exp:      future,
			wantLive: true,
			wantVal:  "v1",
		},
		{
			name:     "live key keeps the first value",
			setup:    func(s *memStore) { require.NoError(t, s.Insert(k, []byte("first"), future())) },
			val:      "second",
			exp:      future,
			wantErr:  errKeyExists,
			wantLive: true,
			wantVal:  "first",
		},
		{
			name:     "expired key may be inserted again",
			setup:    func(s *memStore) { require.NoError(t, s.Insert(k, []byte("old"), past())) },
			val:      "new",
			exp:      future,
			wantLive: true,
			wantVal:  "new",
		},
		{
			name:     "deleted key may be inserted again",
			setup:    func(s *memStore) { require.NoError(t, s.Insert(k, []byte("old"), future())); s.Delete(k) },
			val:      "new",
			exp:      future,
			wantLive: true,
			wantVal:  "new",
		},
		{
			name: "already expired insert is accepted but invisible",
			val:  "gone",
			exp:  past,
		},
		{
			name:     "empty value is a value",
			val:      "",
			exp:      future,
			wantLive: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, "", 100)
			if tt.setup != nil {
				tt.setup(s)
			}
			err := s.Insert(k, []byte(tt.val), tt.exp())
			require.ErrorIs(t, err, tt.wantErr)
			got, ok := s.Get(k)
			assert.Equal(t, tt.wantLive, ok, "Get ok")
			assert.Equal(t, tt.wantVal, string(got))
		})
	}
}

// TestMemStoreCopiesValues checks the Store contract callers rely on to
// reuse their buffers: Insert and Swap keep copies, not what they were
// given.
func TestMemStoreCopiesValues(t *testing.T) {
	s := newTestStore(t, t.TempDir(), 10)
	k := testKey("k")
	v := []byte("inserted")
	require.NoError(t, s.Insert(k, v, future()))
	copy(v, "XXXXXXXX")
	got, _ := s.Get(k)
	assert.Equal(t, "inserted", string(got), "after the caller reused its buffer")
	w := []byte("swapped")
	_, ok := s.Swap(k, w, time.Time{})
	require.True(t, ok)
	copy(w, "YYYYYYY")
	got, _ = s.Get(k)
	assert.Equal(t, "swapped", string(got), "after the caller reused its buffer")
}

func TestMemStoreExpiryIsImmediate(t *testing.T) {
	s := newTestStore(t, "", 10)
	k := testKey("short")
	require.NoError(t, s.Insert(k, []byte("v"), time.Now().Add(time.Millisecond)))
	// No sweep runs: the entry must vanish from Get and Swap on its own.
	require.Eventually(t, func() bool { _, ok := s.Get(k); return !ok }, time.Second, time.Millisecond)
	_, ok := s.Swap(k, []byte("x"), time.Time{})
	assert.False(t, ok, "Swap of an expired entry")
	assert.Equal(t, 1, s.Len(), "Len counts the expired entry until a sweep")
	require.NoError(t, s.Insert(k, []byte("again"), future()))
	got, ok := s.Get(k)
	require.True(t, ok)
	assert.Equal(t, "again", string(got))
	assert.Equal(t, 1, s.Len(), "re-inserting over an expired entry does not count twice")
}

func TestMemStoreSwap(t *testing.T) {
	k := testKey("s")
	tests := []struct {
		name    string
		setup   func(s *memStore)
		wantOld string
		wantOK  bool
		wantGet string // value live after the swap, "" for none
	}{
		{
			name:   "missing",
			wantOK: false,
		},
		{
			name:   "expired",
			setup:  func(s *memStore) { require.NoError(t, s.Insert(k, []byte("old"), past())) },
			wantOK: false,
		},
		{
			name:   "deleted",
			setup:  func(s *memStore) { require.NoError(t, s.Insert(k, []byte("old"), future())); s.Delete(k) },
			wantOK: false,
		},
		{
			name:    "live",
			setup:   func(s *memStore) { require.NoError(t, s.Insert(k, []byte("old"), future())) },
			wantOld: "old",
			wantOK:  true,
			wantGet: "new",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t, "", 10)
			if tt.setup != nil {
				tt.setup(s)
			}
			old, ok := s.Swap(k, []byte("new"), time.Time{})
			require.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.wantOld, string(old))
			got, live := s.Get(k)
			assert.Equal(t, tt.wantGet != "", live)
			assert.Equal(t, tt.wantGet, string(got))
		})
	}
}

// TestMemStoreSwapExpiry checks the expiry a Swap leaves: the entry's own
// when exp is zero or earlier, exp when later, in memory, for the sweep,
// and after a restart.
func TestMemStoreSwapExpiry(t *testing.T) {
	inserted := time.Now().Add(time.Hour).Truncate(time.Second)
	tests := []struct {
		name string
		exp  time.Time // given to Swap
		want time.Time // the entry's expiry after it
	}{
		{"zero keeps the expiry", time.Time{}, inserted},
		{"later", inserted.Add(23 * time.Hour), inserted.Add(23 * time.Hour)},
		{"earlier keeps the expiry", inserted.Add(-30 * time.Minute), inserted},
		{"later in the same second", inserted.Add(time.Millisecond), inserted.Add(time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 10)
			k := testKey("exp")
			require.NoError(t, s.Insert(k, []byte("v1"), inserted))
			_, ok := s.Swap(k, []byte("v2"), tt.exp)
			require.True(t, ok)
			require.NoError(t, s.Flush())
			sh := s.shard(k)
			e, _ := sh.findLocked(k)
			if got := sh.expLocked(e.ref); got != tt.want.UnixNano() {
				t.Errorf("expiry after Swap(%v) = %v; want %v", tt.exp, time.Unix(0, got), tt.want)
			}

			// A sweep just before the expiry keeps the entry, one at it
			// removes it, whatever the second the insert indexed.
			s.Sweep(tt.want.Add(-time.Nanosecond))
			_, ok = s.Get(k)
			assert.True(t, ok, "swept before its expiry")
			s.Sweep(tt.want)
			assert.Equal(t, 0, s.Len(), "entries left by a sweep at its expiry")

			r := newTestStore(t, dir, 10) // the state written before the sweeps
			rsh := r.shard(k)
			re, ok := rsh.findLocked(k)
			require.True(t, ok, "restored")
			if got := rsh.expLocked(re.ref); got != tt.want.UnixNano() {
				t.Errorf("expiry after a restart = %v; want %v", time.Unix(0, got), tt.want)
			}
		})
	}

	// And an entry about to expire still expires after a swap that keeps
	// its expiry.
	s := newTestStore(t, "", 10)
	k := testKey("short")
	require.NoError(t, s.Insert(k, []byte("v1"), time.Now().Add(time.Millisecond)))
	s.Swap(k, []byte("v2"), time.Time{})
	require.Eventually(t, func() bool { _, ok := s.Get(k); return !ok }, time.Second, time.Millisecond)
}

// TestMemStoreExtend checks that Extend moves only a live entry's expiry,
// only later, keeps its value, and persists.
func TestMemStoreExtend(t *testing.T) {
	inserted := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, tt := range []struct {
		name   string
		insert time.Time // zero: no entry
		exp    time.Time
		wantOK bool
		want   time.Time
	}{
		{"missing", time.Time{}, inserted, false, time.Time{}},
		{"expired", past(), inserted, false, time.Time{}},
		{"later", inserted, inserted.Add(time.Hour), true, inserted.Add(time.Hour)},
		{"earlier", inserted, inserted.Add(-time.Minute), true, inserted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 10)
			k := testKey("k")
			if !tt.insert.IsZero() {
				require.NoError(t, s.Insert(k, []byte("v"), tt.insert))
			}
			if got := s.Extend(k, tt.exp); got != tt.wantOK {
				t.Fatalf("Extend(%v) = %v; want %v", tt.exp, got, tt.wantOK)
			}
			if !tt.wantOK {
				return
			}
			require.NoError(t, s.Flush())
			for _, st := range []*memStore{s, newTestStore(t, dir, 10)} { // and after a restart
				v, ok := st.Get(k)
				require.True(t, ok)
				assert.Equal(t, "v", string(v), "value")
				sh := st.shard(k)
				e, _ := sh.findLocked(k)
				assert.Equal(t, tt.want.UnixNano(), sh.expLocked(e.ref), "expiry")
			}
		})
	}
}

// TestMemStoreSync checks that Sync puts on disk the changes of the
// shards it is given, as a store opened on the files without a Flush (the
// process gone) finds them, and leaves the other shards' changes pending
// for the next write.
func TestMemStoreSync(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	synced, other := Key{0, 1}, Key{1, 1} // in shards 0 and 1
	for _, tt := range []struct {
		name   string
		before bool                    // synced is on disk before the change
		write  func(s *memStore) error // the change to synced
		want   bool                    // synced is live after the crash
	}{
		{"insert", false, func(s *memStore) error { return s.Insert(synced, []byte("v"), exp) }, true},
		{"swap", true, func(s *memStore) error {
			if _, ok := s.Swap(synced, []byte("v"), time.Time{}); !ok {
				return errors.New("not live")
			}
			return nil
		}, true},
		{"delete", true, func(s *memStore) error { s.Delete(synced); return nil }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 10)
			if tt.before {
				require.NoError(t, s.Insert(synced, []byte("old"), exp))
				require.NoError(t, s.Flush())
			}
			require.NoError(t, tt.write(s))
			require.NoError(t, s.Insert(other, []byte("o"), exp))
			require.NoError(t, s.Sync(synced))

			// The crash is seen in a copy of the files: opening a store
			// rewrites them, under s.
			crashDir := t.TempDir()
			require.NoError(t, os.CopyFS(crashDir, os.DirFS(dir)))
			crashed := newTestStore(t, crashDir, 10)
			v, ok := crashed.Get(synced)
			if ok != tt.want || ok && string(v) != "v" {
				t.Fatalf("after a crash, Get(synced) = %q, %v; want %q, %v", v, ok, "v", tt.want)
			}
			_, ok = crashed.Get(other)
			assert.False(t, ok, "the other shard's change was written by Sync")

			require.NoError(t, s.WritePending()) // which writes only the shards marked pending
			_, ok = newTestStore(t, dir, 10).Get(other)
			assert.True(t, ok, "the other shard's change is lost to the next write")
		})
	}
}

// TestMemStoreSyncFailsDuringFlush fails a Sync while a paced Flush (the
// ticker's) has let go of the files between shards, on a shard the Flush
// has passed: the Flush, which then works for every shard it writes, must
// leave the store refusing writes, as the failed shard is still to be
// rewritten; the next Flush rewrites it and ends the refusal.
// breakFile puts an empty directory where the file at path was: opening
// it for writing then fails, and not as a missing file, which the store
// writes again whole at once (TestMemStoreLogRemovedWhileRunning).
func breakFile(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o700))
}

func TestMemStoreSyncFailsDuringFlush(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 10)
	exp := time.Now().Add(time.Hour)
	failed := keyInShard("failed", 0)
	var syncErr error
	prev := -1
	testHookFlushPause = func(i int) {
		if prev == 0 && syncErr == nil { // the Flush has written shard 0
			breakFile(t, s.logPaths[0])
			require.NoError(t, s.Insert(failed, []byte("v"), exp))
			syncErr = s.Sync(failed)
		}
		prev = i
	}
	t.Cleanup(func() { testHookFlushPause = nil })
	var p pacer
	require.NoError(t, s.flush(allShards, false, true, &p))
	testHookFlushPause = nil
	require.Error(t, syncErr, "the Sync with its shard's log unwritable")
	assert.True(t, s.persistBad.Load(), "writes accepted after a Flush during which a Sync failed")

	require.NoError(t, os.Remove(s.logPaths[0]))
	require.NoError(t, s.Flush())
	assert.False(t, s.persistBad.Load(), "writes refused after a Flush of every shard worked")
	_, ok := newTestStore(t, dir, 10).Get(failed)
	assert.True(t, ok, "the failed Sync's change after the next Flush")
}

// TestMemStoreSyncDuringTicks runs Syncs against ticks back to back
// (paced flushes, which let go of the files between shards), then a few
// more once the ticks stopped: under -race nothing they share is touched
// unlocked, and a store restored from the files afterwards, without a
// last Flush, holds every synced entry.
func TestMemStoreSyncDuringTicks(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 1<<20)
	exp := time.Now().Add(time.Hour)
	stop, ticked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
				s.Tick(time.Now())
			}
		}
	}()
	const writers, each = 4, 50
	synced := make([][]Key, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for n := range each {
				k := benchKey(uint64(g*each + n))
				if err := s.Insert(k, []byte("synced"), exp); err != nil {
					t.Error(err)
					return
				}
				// Changes the Sync does not cover, for the ticks to write.
				if err := s.Insert(benchKey(uint64(1e6+g*each+n)), make([]byte, 200), exp); err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(k); err != nil {
					t.Error(err)
					return
				}
				synced[g] = append(synced[g], k)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-ticked
	require.False(t, t.Failed())
	for n := range 10 { // the ticks wrote everything before: these are the Syncs' alone
		k := benchKey(uint64(2e6 + n))
		require.NoError(t, s.Insert(k, []byte("synced"), exp))
		require.NoError(t, s.Sync(k))
		synced[0] = append(synced[0], k)
	}

	crashDir := t.TempDir()
	require.NoError(t, os.CopyFS(crashDir, os.DirFS(dir)))
	r := newTestStore(t, crashDir, 1<<20)
	for _, keys := range synced {
		for _, k := range keys {
			if v, ok := r.Get(k); !ok || string(v) != "synced" {
				t.Fatalf("synced entry %x after a crash: %q, %v", k[:4], v, ok)
			}
		}
	}
}

func TestMemStoreDelete(t *testing.T) {
	s := newTestStore(t, "", 10)
	live, expired := testKey("live"), testKey("expired")
	require.NoError(t, s.Insert(live, []byte("v"), future()))
	require.NoError(t, s.Insert(expired, []byte("v"), past()))
	require.Equal(t, 2, s.Len())

	s.Delete(live)
	s.Delete(expired)
	s.Delete(testKey("never there"))
	s.Delete(live) // twice is harmless

	assert.Equal(t, 0, s.Len())
	_, ok := s.Get(live)
	assert.False(t, ok)
}

func TestMemStoreFull(t *testing.T) {
	s := newTestStore(t, "", 3)
	for i := range 3 {
		require.NoError(t, s.Insert(testKey(fmt.Sprint(i)), []byte("v"), future()))
	}
	err := s.Insert(testKey("one too many"), []byte("v"), future())
	require.ErrorIs(t, err, errStoreFull)
	_, ok := s.Get(testKey("one too many"))
	assert.False(t, ok, "a refused insert stored its value")
	assert.Equal(t, 3, s.Len())

	// A conflict is still a conflict when full.
	require.ErrorIs(t, s.Insert(testKey("0"), []byte("v"), future()), errKeyExists)

	// Deleting makes room.
	s.Delete(testKey("0"))
	require.NoError(t, s.Insert(testKey("one too many"), []byte("v"), future()))
}

func TestMemStoreFullCountsUntilSweep(t *testing.T) {
	s := newTestStore(t, "", 2)
	require.NoError(t, s.Insert(testKey("a"), []byte("v"), past()))
	require.NoError(t, s.Insert(testKey("b"), []byte("v"), past()))
	// Re-inserting an expired key reuses its slot.
	require.NoError(t, s.Insert(testKey("a"), []byte("v"), future()))
	require.Equal(t, 2, s.Len())
	s.Sweep(time.Now())
	assert.Equal(t, 1, s.Len())
	require.NoError(t, s.Insert(testKey("c"), []byte("v"), future()))
	require.ErrorIs(t, s.Insert(testKey("d"), []byte("v"), future()), errStoreFull)
}

// TestMemStoreFullConcurrent checks the cap under concurrent inserts into
// different shards: the store never holds more than maxLive entries.
func TestMemStoreFullConcurrent(t *testing.T) {
	const maxLive, n = 10, 200
	for round := range 20 {
		s := newTestStore(t, "", maxLive)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s.Insert(keyInShard(fmt.Sprint(round, i), i), []byte("v"), future())
			}()
		}
		close(start)
		wg.Wait()
		held := 0
		for i := range s.shards {
			held += s.shards[i].t.n
		}
		require.LessOrEqual(t, held, maxLive, "round %d: entries held", round)
		require.Equal(t, held, s.Len(), "round %d: Len", round)
	}
}

func TestMemStoreSweep(t *testing.T) {
	s := newTestStore(t, "", 100)
	now := time.Now()
	for i := range 10 {
		require.NoError(t, s.Insert(testKey(fmt.Sprint("old", i)), []byte("v"), now.Add(-time.Duration(i+1)*time.Second)))
		require.NoError(t, s.Insert(testKey(fmt.Sprint("new", i)), []byte("v"), now.Add(time.Hour)))
	}
	require.Equal(t, 20, s.Len())
	s.Sweep(now)
	assert.Equal(t, 10, s.Len())
	for i := range 10 {
		_, ok := s.Get(testKey(fmt.Sprint("new", i)))
		assert.True(t, ok, "new%d swept", i)
		_, had := s.shard(testKey(fmt.Sprint("old", i))).findLocked(testKey(fmt.Sprint("old", i)))
		assert.False(t, had, "old%d not swept", i)
	}
	s.Sweep(now.Add(2 * time.Hour))
	assert.Equal(t, 0, s.Len())
}

// TestMemStoreSwapRace is the redemption race: of many concurrent Swaps of
// one key, exactly one sees the value first inserted, and each sees a value
// written by exactly one other (the chain of swaps is a permutation).
func TestMemStoreSwapRace(t *testing.T) {
	const n = 100
	s := newTestStore(t, "", 10)
	k := testKey("code")
	require.NoError(t, s.Insert(k, []byte("original"), future()))

	var wg sync.WaitGroup
	start := make(chan struct{})
	olds := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			old, ok := s.Swap(k, []byte(fmt.Sprint("g", i)), time.Time{})
			if ok {
				olds[i] = string(old)
			}
		}()
	}
	close(start)
	wg.Wait()

	seen := map[string]int{}
	for _, o := range olds {
		seen[o]++
	}
	assert.Equal(t, 1, seen["original"], "Swaps that saw the original value")
	assert.Zero(t, seen[""], "Swaps that failed on a live key")
	for v, c := range seen {
		assert.Equal(t, 1, c, "value %q seen by %d Swaps", v, c)
	}
}

// stateFiles returns the snapshot and log files in dir, and fails on any
// other file.
func stateFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var snaps []string
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "store-") && (strings.HasSuffix(name, ".snap") || strings.HasSuffix(name, ".log")) {
			snaps = append(snaps, filepath.Join(dir, name))
			continue
		}
		t.Errorf("unexpected file %s in the data directory", name)
	}
	return snaps
}

func TestMemStoreSnapshotRestore(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 100)
	now := time.Now()
	type want struct {
		val string
		exp time.Time
	}
	live := map[Key]want{}
	for i := range 50 {
		k := testKey(fmt.Sprint("live", i))
		w := want{fmt.Sprint("value ", i), now.Add(time.Duration(i+1) * time.Hour)}
		require.NoError(t, s.Insert(k, []byte(w.val), w.exp))
		live[k] = w
	}
	expired := []Key{testKey("expired0"), testKey("expired1")}
	for _, k := range expired {
		require.NoError(t, s.Insert(k, []byte("old"), now.Add(-time.Minute)))
	}
	// A swapped and a deleted entry persist as they are now.
	swapped := testKey("live0")
	_, ok := s.Swap(swapped, []byte("swapped"), time.Time{})
	require.True(t, ok)
	live[swapped] = want{"swapped", live[swapped].exp}
	deleted := testKey("live1")
	s.Delete(deleted)
	delete(live, deleted)

	require.NoError(t, s.Flush())

	files := stateFiles(t, dir)
	require.NotEmpty(t, files)
	for _, f := range files {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode of %s", f)
	}

	r := newTestStore(t, dir, 100)
	assert.Equal(t, len(live), r.Len(), "restored entries")
	for k, w := range live {
		got, ok := r.Get(k)
		if assert.True(t, ok, "entry %x lost", k[:4]) {
			assert.Equal(t, w.val, string(got))
			sh := r.shard(k)
			e, _ := sh.findLocked(k)
			assert.Equal(t, w.exp.UnixNano(), sh.expLocked(e.ref), "expiry of %x", k[:4])
		}
	}
	for _, k := range expired {
		_, had := r.shard(k).findLocked(k)
		assert.False(t, had, "expired entry %x restored", k[:4])
	}
	_, ok = r.Get(deleted)
	assert.False(t, ok, "deleted entry restored")
}

// TestMemStoreFlushAppendsOnlyChanges checks that a Flush writes only the
// changes since the last one, to the changed shards' logs, and that a
// restart replays them.
func TestMemStoreFlushAppendsOnlyChanges(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 100)
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return b
	}
	require.NoError(t, s.Insert(keyInShard("a", 1), []byte("a"), future()))
	require.NoError(t, s.Flush())
	snap1, log1, log2 := read("store-01.snap"), read("store-01.log"), read("store-02.log")

	require.NoError(t, s.Insert(keyInShard("b", 2), []byte("b"), future()))
	require.NoError(t, s.Flush())
	assert.Equal(t, snap1, read("store-01.snap"), "snapshot of shard 1 rewritten")
	assert.Equal(t, log1, read("store-01.log"), "log of the unchanged shard 1 written")
	grown := read("store-02.log")
	assert.Greater(t, len(grown), len(log2), "log of shard 2")
	assert.Equal(t, log2, grown[:len(log2)], "log of shard 2 rewritten rather than appended to")

	s.Delete(keyInShard("a", 1))
	require.NoError(t, s.Flush())
	r := newTestStore(t, dir, 100)
	_, ok := r.Get(keyInShard("a", 1))
	assert.False(t, ok, "deleted entry came back")
	got, ok := r.Get(keyInShard("b", 2))
	assert.True(t, ok, "logged entry lost")
	assert.Equal(t, "b", string(got))
	assert.Equal(t, 1, r.Len())
}

// TestMemStoreCompacts checks that a log that outgrows its snapshot is
// folded into a new snapshot, and that the state survives it.
func TestMemStoreCompacts(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 1000)
	k := keyInShard("big", 3)
	val := bytes.Repeat([]byte("v"), 64<<10)
	require.NoError(t, s.Insert(k, val, future()))
	for i := range 20 { // 20 swaps of 64 KiB: the log passes 1 MiB
		_, ok := s.Swap(k, append([]byte(fmt.Sprint(i)), val...), time.Time{})
		require.True(t, ok)
	}
	require.NoError(t, s.Flush())
	assert.Equal(t, logHeaderSize, fileSize(t, filepath.Join(dir, "store-03.log")), "log size after compaction")
	r := newTestStore(t, dir, 1000)
	got, ok := r.Get(k)
	require.True(t, ok)
	assert.Equal(t, "19", string(got[:2]))
}

// TestMemStoreCompactionsAreSpread checks that one Flush makes at most
// compactionsPerFlush of the compactions that fall due, that shards take
// turns (those compacted first, due again at once, do not keep the last
// one waiting), and that nothing is lost either way.
// TestMemStoreCompactsWhenRecordsDie checks compactDue's rule: a shard
// that only grows keeps appending to its log, and is folded into a new
// snapshot once most of what it wrote describes no live entry.
func TestMemStoreCompactsWhenRecordsDie(t *testing.T) {
	val := bytes.Repeat([]byte("v"), 64<<10)
	tests := []struct {
		name string
		kill func(s *memStore, keys []Key)
	}{
		{"deleted", func(s *memStore, keys []Key) {
			for _, k := range keys[1:] {
				s.Delete(k)
			}
		}},
		{"swept", func(s *memStore, _ []Key) { s.Sweep(time.Now().Add(2 * time.Hour)) }},
		{"replaced three times", func(s *memStore, keys []Key) {
			for range 3 {
				for _, k := range keys {
					s.Swap(k, val, time.Time{})
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			logSize := func() int64 { return fileSize(t, filepath.Join(dir, "store-03.log")) }
			s := newTestStore(t, dir, 1000)
			var keys []Key
			for i := range 40 { // 2.5 MiB
				keys = append(keys, keyInShard(fmt.Sprint("k", i), 3))
				require.NoError(t, s.Insert(keys[i], val, future()))
				if i%10 == 9 {
					require.NoError(t, s.Flush())
				}
			}
			assert.Greater(t, logSize(), int64(40<<16), "the log of a shard that only grew")
			tt.kill(s, keys)
			require.NoError(t, s.Flush())
			assert.Equal(t, logHeaderSize, logSize(), "the log once most records died")

			r := newTestStore(t, dir, 1000)
			for _, k := range keys {
				want, wantOK := s.Get(k)
				got, ok := r.Get(k)
				require.Equal(t, wantOK, ok, "entry %x after a restart", k[:4])
				require.Equal(t, want, got)
			}
		})
	}
}

// TestMemStoreTick checks the ticker's paced path end to end: a sweep, a
// log append of over 256 KiB (written in pieces, with pauses), and a
// compaction streamed the same way once most records have died.
func TestMemStoreTick(t *testing.T) {
	dir := t.TempDir()
	logSize := func() int64 { return fileSize(t, filepath.Join(dir, "store-03.log")) }
	s := newTestStore(t, dir, 1000)
	val := bytes.Repeat([]byte("v"), 64<<10)
	var keys []Key
	for i := range 6 {
		keys = append(keys, keyInShard(fmt.Sprint("big", i), 3))
		require.NoError(t, s.Insert(keys[i], val, future()))
	}
	gone := keyInShard("gone", 5)
	require.NoError(t, s.Insert(gone, []byte("x"), time.Now().Add(time.Millisecond)))

	s.Tick(time.Now().Add(time.Second))
	assert.Equal(t, len(keys), s.Len(), "entries after the sweep")
	assert.Greater(t, logSize(), int64(len(keys))<<16, "log after the append")

	for i := range 40 { // dead records: 2.5 MiB against 384 KiB live
		_, ok := s.Swap(keys[0], append([]byte(fmt.Sprint(i)), val...), time.Time{})
		require.True(t, ok)
	}
	s.Tick(time.Now().Add(time.Second))
	assert.Equal(t, logHeaderSize, logSize(), "log after the compaction")

	r := newTestStore(t, dir, 1000)
	assert.Equal(t, len(keys), r.Len())
	got, ok := r.Get(keys[0])
	require.True(t, ok)
	assert.Equal(t, "39", string(got[:2]))
}

func TestMemStoreCompactionsAreSpread(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 1000)
	val := bytes.Repeat([]byte("v"), 64<<10)
	due := compactionsPerFlush + 1
	fill := func(sh int) { // 20 swaps of 64 KiB: the shard's log passes 1 MiB
		k := keyInShard("big", sh)
		if _, ok := s.Get(k); !ok {
			require.NoError(t, s.Insert(k, val, future()))
		}
		for i := range 20 {
			_, ok := s.Swap(k, append([]byte(fmt.Sprint(i)), val...), time.Time{})
			require.True(t, ok)
		}
	}
	compacted := func() (shards []int) {
		for sh := range due {
			if fileSize(t, filepath.Join(dir, fmt.Sprintf("store-%02x.log", sh))) == logHeaderSize {
				shards = append(shards, sh)
			}
		}
		return shards
	}
	for sh := range due {
		fill(sh)
	}
	require.NoError(t, s.Flush())
	first := compacted()
	require.Len(t, first, compactionsPerFlush, "compacted by the first Flush")
	for _, sh := range first { // due again, before the one left over
		fill(sh)
	}
	require.NoError(t, s.Flush())
	for sh := range due {
		if !slices.Contains(first, sh) {
			assert.Contains(t, compacted(), sh, "the shard left over is compacted by the second Flush")
		}
	}

	r := newTestStore(t, dir, 1000)
	for sh := range due {
		got, ok := r.Get(keyInShard("big", sh))
		require.True(t, ok)
		assert.Equal(t, "19", string(got[:2]))
	}
}

// TestMemStoreValueCompactionsAreSpread checks that one Sweep compacts the
// values of at most valCompactionsPerSweep shards, and the next the rest.
func TestMemStoreValueCompactionsAreSpread(t *testing.T) {
	s := newTestStore(t, "", 1000)
	due := valCompactionsPerSweep + 2
	val := bytes.Repeat([]byte("v"), valChunkSize/4)
	for sh := range due { // each shard: one live value, and garbage of 8 replaced ones
		k := keyInShard("k", sh)
		require.NoError(t, s.Insert(k, val, future()))
		for range 8 {
			_, ok := s.Swap(k, val, time.Time{})
			require.True(t, ok)
		}
	}
	compacted := func() (n int) {
		for sh := range due {
			shard := s.shard(keyInShard("k", sh))
			shard.mu.Lock()
			if shard.garbage == 0 {
				n++
			}
			shard.mu.Unlock()
		}
		return n
	}
	s.Sweep(time.Now())
	assert.Equal(t, valCompactionsPerSweep, compacted(), "after the first Sweep")
	s.Sweep(time.Now())
	assert.Equal(t, due, compacted(), "after the second")
	for sh := range due {
		got, ok := s.Get(keyInShard("k", sh))
		require.True(t, ok)
		assert.Equal(t, val, got)
	}
}

// TestMemStoreValuesSurviveCompaction drives one shard through rounds of
// inserts, swaps, deletes and expiries, sweeping after each so that its
// values are compacted whenever garbage is due. Every live value
// must read back as written, every slice handed out earlier must still
// hold its bytes, and the garbage must stay bounded.
func TestMemStoreValuesSurviveCompaction(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		t.Run(fmt.Sprintf("dir=%q", dir), func(t *testing.T) {
			s := newTestStore(t, dir, 1<<20)
			const shard = 5
			rng := rand.New(rand.NewPCG(1, 2))
			model := map[Key][]byte{}
			type handedOut struct{ got, want []byte }
			var held []handedOut
			written := 0
			value := func(tag string) []byte {
				v := bytes.Repeat([]byte{byte(rng.IntN(256))}, 1000+rng.IntN(3000))
				copy(v, tag)
				written += len(v)
				return v
			}
			for round := range 30 {
				soon := time.Now().Add(time.Millisecond)
				for i := range 60 {
					name := fmt.Sprint(round, "/", i)
					k := keyInShard(name, shard)
					if i%6 == 0 { // expires before this round's sweep
						require.NoError(t, s.Insert(k, value(name), soon))
						continue
					}
					v := value(name)
					require.NoError(t, s.Insert(k, v, future()))
					model[k] = v
				}
				for k := range model {
					switch rng.IntN(4) {
					case 0:
						v := value("swapped")
						_, ok := s.Swap(k, v, time.Time{})
						require.True(t, ok)
						model[k] = v
					case 1:
						s.Delete(k)
						delete(model, k)
					case 2:
						got, ok := s.Get(k)
						require.True(t, ok)
						held = append(held, handedOut{got, bytes.Clone(got)})
					}
				}
				s.Sweep(soon.Add(time.Millisecond))
			}

			live := 0
			for k, want := range model {
				got, ok := s.Get(k)
				require.True(t, ok)
				require.Equal(t, want, got, "value of %x", k[:4])
				live += int(entryHeader) + len(want)
			}
			for _, h := range held {
				require.Equal(t, h.want, h.got, "a slice handed out before a compaction")
			}
			sh := s.shard(keyInShard("", shard))
			sh.mu.Lock()
			used, garbage := sh.used, sh.garbage
			sh.mu.Unlock()
			assert.EqualValues(t, live, used-garbage, "bytes of live entries")
			assert.LessOrEqual(t, garbage, max(int64(valChunkSize), int64(live)/2), "garbage is bounded")
			assert.Less(t, used, int64(written)/2, "space was reclaimed (%d bytes written)", written)
			if dir != "" {
				require.NoError(t, s.Flush())
				r := newTestStore(t, dir, 1<<20)
				for k, want := range model {
					got, ok := r.Get(k)
					require.True(t, ok)
					require.Equal(t, want, got)
				}
				assert.Equal(t, len(model), r.Len())
			}
		})
	}
}

// TestMemStoreLogRecovery covers what a crash can leave: a log cut off in
// its last record (dropped), a log from before a compaction (ignored), and
// a log damaged in the middle (an error naming it).
// TestMemStoreCompactsWhileWritten writes snapshots while writers insert,
// swap and delete and sweeps compact values (tiny chunks, so new chunks and
// value compactions come all the time): a snapshot reads keys and values
// outside the shard's lock, so under -race this checks that it only reads
// what no one writes, and the restore that everything written is there.
func TestMemStoreCompactsWhileWritten(t *testing.T) {
	old := valChunkSize
	valChunkSize = 256
	t.Cleanup(func() { valChunkSize = old })
	dir := t.TempDir()
	s := newTestStore(t, dir, 1<<20)
	const writers = 4
	models := make([]map[Key]string, writers) // each writer its own keys
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		models[w] = map[Key]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, rng := models[w], rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := testKey(fmt.Sprint(w, "-", rng.IntN(200)))
				v := fmt.Sprint(w, "-", i)
				switch _, had := m[k]; {
				case !had:
					if err := s.Insert(k, []byte(v), future()); err != nil {
						t.Errorf("Insert: %v", err)
						return
					}
					m[k] = v
				case rng.IntN(3) == 0:
					s.Delete(k)
					delete(m, k)
				default:
					s.Swap(k, []byte(v), time.Time{})
					m[k] = v
				}
			}
		}()
	}
	for range 4 {
		require.NoError(t, s.Compact())
		s.Sweep(time.Now())
	}
	close(stop)
	wg.Wait()
	require.NoError(t, s.Flush())

	r := newTestStore(t, dir, 1<<20)
	n := 0
	for _, m := range models {
		for k, want := range m {
			got, ok := r.Get(k)
			require.True(t, ok, "entry %x lost", k[:4])
			require.Equal(t, want, string(got), "value of %x", k[:4])
			n++
		}
	}
	assert.Equal(t, n, r.Len(), "entries restored")
}

func TestMemStoreLogRecovery(t *testing.T) {
	setup := func(t *testing.T) (dir, logPath string, keys []Key) {
		dir = t.TempDir()
		s := newTestStore(t, dir, 100)
		for i := range 3 {
			k := keyInShard(fmt.Sprint("k", i), 5)
			require.NoError(t, s.Insert(k, []byte(fmt.Sprint("v", i)), future()))
			keys = append(keys, k)
			require.NoError(t, s.Flush())
		}
		return dir, filepath.Join(dir, "store-05.log"), keys
	}
	t.Run("torn last record", func(t *testing.T) {
		dir, logPath, keys := setup(t)
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(logPath, b[:len(b)-3], 0o600))
		r := newTestStore(t, dir, 100)
		for i, k := range keys {
			_, ok := r.Get(k)
			assert.Equal(t, i < 2, ok, "entry %d", i)
		}
	})
	t.Run("stale log", func(t *testing.T) {
		dir, logPath, keys := setup(t)
		stale, err := os.ReadFile(logPath)
		require.NoError(t, err)
		s := newTestStore(t, dir, 100) // compacts: new snapshot, new epoch
		s.Delete(keys[0])
		require.NoError(t, s.Compact())
		require.NoError(t, os.WriteFile(logPath, stale, 0o600)) // as if the crash came between the two renames
		r := newTestStore(t, dir, 100)
		_, ok := r.Get(keys[0])
		assert.False(t, ok, "a stale log brought a deleted entry back")
		_, ok = r.Get(keys[1])
		assert.True(t, ok)
	})
	t.Run("damaged record", func(t *testing.T) {
		dir, logPath, _ := setup(t)
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		b[logHeaderSize+5] ^= 0xff // inside the first of three records
		require.NoError(t, os.WriteFile(logPath, b, 0o600))
		_, err = newMemStore(dir, 100)
		require.Error(t, err)
		assert.Contains(t, err.Error(), logPath)
	})
}

func TestMemStoreNoDirKeepsNothing(t *testing.T) {
	s := newTestStore(t, "", 10)
	require.NoError(t, s.Insert(testKey("a"), []byte("v"), future()))
	require.NoError(t, s.Flush())
}

func TestMemStoreFlushFailure(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(t *testing.T, dir string) // makes dir unwritable
		mend   func(t *testing.T, dir string)
	}{
		{
			// Works as root too, where permissions do not stop writes.
			name: "directory replaced by a file",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.RemoveAll(dir))
				require.NoError(t, os.WriteFile(dir, []byte("not a directory"), 0o600))
			},
			mend: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(dir))
				require.NoError(t, os.Mkdir(dir, 0o700))
			},
		},
		{
			name: "directory removed",
			break_: func(t *testing.T, dir string) {
				require.NoError(t, os.RemoveAll(dir))
			},
			mend: func(t *testing.T, dir string) {
				require.NoError(t, os.Mkdir(dir, 0o700))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			s := newTestStore(t, dir, 100)
			k := testKey("before")
			require.NoError(t, s.Insert(k, []byte("v"), future()))
			require.NoError(t, s.Flush())

			tt.break_(t, dir)
			require.NoError(t, s.Insert(testKey("pending"), []byte("p"), future()))
			require.Error(t, s.Flush())

			require.ErrorIs(t, s.Insert(testKey("refused"), []byte("v"), future()), errStoreUnavailable)
			// Reads and swaps of what is held still work.
			got, ok := s.Get(k)
			require.True(t, ok)
			assert.Equal(t, "v", string(got))
			// Flushing again while still broken keeps refusing.
			require.Error(t, s.Flush())
			require.ErrorIs(t, s.Insert(testKey("refused"), []byte("v"), future()), errStoreUnavailable)

			tt.mend(t, dir)
			require.NoError(t, s.Flush())
			require.NoError(t, s.Insert(testKey("after"), []byte("v"), future()))

			// The write that was pending during the failure reached the disk.
			require.NoError(t, s.Flush())
			stateFiles(t, dir) // no temp files left behind
			r := newTestStore(t, dir, 100)
			_, ok = r.Get(testKey("pending"))
			assert.True(t, ok, "entry inserted while the disk failed was lost")
			_, ok = r.Get(testKey("after"))
			assert.True(t, ok)
		})
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	require.NoError(t, writeFileAtomic(path, []byte("new")))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// A failed write leaves no temp file and the old content.
	require.Error(t, writeFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "isdir"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "isdir", "x"), nil, 0o600))
	require.Error(t, writeFileAtomic(filepath.Join(dir, "isdir"), []byte("x")), "rename over a non-empty directory")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"f", "isdir"}, names)
}

// validSnapshot writes a store with a few entries to dir and returns the
// path of one of its snapshot files.
func validSnapshot(t *testing.T, dir string) string {
	t.Helper()
	s := newTestStore(t, dir, 100)
	for i := range 5 {
		require.NoError(t, s.Insert(keyInShard(fmt.Sprint(i), 7), []byte(fmt.Sprint("value ", i)), future()))
	}
	require.NoError(t, s.Flush())
	path := filepath.Join(dir, "store-07.snap")
	_, err := os.Stat(path)
	require.NoError(t, err)
	return path
}

func TestMemStoreCorruptSnapshot(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"truncated by one byte", func(b []byte) []byte { return b[:len(b)-1] }},
		{"truncated to half", func(b []byte) []byte { return b[:len(b)/2] }},
		{"header only", func(b []byte) []byte { return b[:len(snapMagic)] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"byte flipped in a value", func(b []byte) []byte { b[len(b)-8] ^= 0x01; return b }},
		{"byte flipped in the count", func(b []byte) []byte { b[len(snapMagic)] ^= 0x80; return b }},
		{"byte flipped in the checksum", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }},
		{"byte flipped in the magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"byte appended", func(b []byte) []byte { return append(b, 0) }},
		{"garbage", func(b []byte) []byte { return bytes.Repeat([]byte("garbage!"), 100) }},
		{"older format", func(b []byte) []byte { b[len(snapMagic)-2] = '0'; return b }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := validSnapshot(t, dir)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, tt.corrupt(b), 0o600))

			s, err := newMemStore(dir, 100)
			require.Error(t, err, "a damaged snapshot restored silently")
			assert.Nil(t, s)
			assert.True(t, strings.Contains(err.Error(), path), "error %q does not name %s", err, path)

			// Its advice works: with the snapshot and its log moved
			// away, the store starts, without that shard's entries.
			logf := strings.TrimSuffix(path, ".snap") + ".log"
			require.Contains(t, err.Error(), filepath.Base(logf), "the advice names the log")
			require.NoError(t, os.Rename(path, path+".bad"))
			if _, err := os.Stat(logf); err == nil {
				require.NoError(t, os.Rename(logf, logf+".bad"))
			}
			_, err = newMemStore(dir, 100)
			assert.NoError(t, err, "after following the advice")
		})
	}
}

// TestMemStoreLogWithoutItsSnapshot loses a shard's snapshot, or puts an
// older copy of it back, beside a log that continues the newer one: the
// entries the snapshot held are in neither, so start-up stops, naming
// both files, rather than start without them.
func TestMemStoreLogWithoutItsSnapshot(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(t *testing.T, snap string, old []byte)
	}{
		{"snapshot deleted", func(t *testing.T, snap string, _ []byte) { require.NoError(t, os.Remove(snap)) }},
		{"older snapshot put back", func(t *testing.T, snap string, old []byte) { require.NoError(t, os.WriteFile(snap, old, 0o600)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 100)
			k := testKey("k")
			require.NoError(t, s.Insert(k, []byte("v"), future()))
			require.NoError(t, s.Compact()) // k is in a snapshot
			i := int(k[0] % numShards)
			snap, logf := s.snapPaths[i], s.logPaths[i]
			old, err := os.ReadFile(snap)
			require.NoError(t, err)
			_, ok := s.Swap(k, []byte("v2"), time.Time{})
			require.True(t, ok)
			require.NoError(t, s.Compact()) // a newer snapshot, and a log continuing it
			require.NoError(t, s.Insert(testKey("k2"), []byte("v"), future()))
			require.NoError(t, s.Flush())
			tt.spoil(t, snap, old)

			r, err := newMemStore(dir, 100)
			require.Error(t, err, "restored without the snapshot its log continues")
			assert.Nil(t, r)
			assert.Contains(t, err.Error(), logf)
			assert.Contains(t, err.Error(), snap)
		})
	}
}

func TestMemStoreUnreadableSnapshot(t *testing.T) {
	dir := t.TempDir()
	// A directory where a snapshot file should be cannot be read.
	path := filepath.Join(dir, "store-00.snap")
	require.NoError(t, os.Mkdir(path, 0o700))
	_, err := newMemStore(dir, 100)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
}

func TestMemStoreDataDirIsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, err := newMemStore(path, 100)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
}

func TestMemStoreIgnoresTempFiles(t *testing.T) {
	dir := t.TempDir()
	validSnapshot(t, dir)
	// A crash between CreateTemp and Rename leaves a temp file behind; it
	// is not a snapshot.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "store-07.snap.tmp123"), []byte("half"), 0o600))
	s := newTestStore(t, dir, 100)
	assert.Equal(t, 5, s.Len())
}

func TestSnapshotEncodeDecode(t *testing.T) {
	tests := []struct {
		name string
		recs []snapRecord
	}{
		{"none", nil},
		{"one", []snapRecord{{testKey("a"), 1, []byte("v")}}},
		{"empty value", []snapRecord{{testKey("a"), 1, nil}}},
		{"negative and extreme expiries", []snapRecord{
			{testKey("a"), -1, []byte("x")},
			{testKey("b"), 1<<63 - 1, []byte("y")},
			{testKey("c"), -1 << 63, []byte("z")},
		}},
		{"large value", []snapRecord{{testKey("a"), 42, bytes.Repeat([]byte{0xff}, 70000)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := encodeSnapshot(3, tt.recs)
			var got []snapRecord
			epoch, err := decodeSnapshot(b, func(k Key, exp int64, val []byte) {
				got = append(got, snapRecord{k, exp, val})
			})
			require.NoError(t, err)
			assert.Equal(t, uint64(3), epoch)
			require.Len(t, got, len(tt.recs))
			for i := range got {
				assert.Equal(t, tt.recs[i].key, got[i].key)
				assert.Equal(t, tt.recs[i].exp, got[i].exp)
				assert.Equal(t, string(tt.recs[i].val), string(got[i].val))
			}
		})
	}
}

// TestWriteSnapshotFailures checks that writeSnapshot reports what would
// leave a snapshot start-up refuses: a write that fails, and fewer records
// than the count it wrote first.
func TestWriteSnapshotFailures(t *testing.T) {
	recs := []snapRecord{{testKey("a"), 1, []byte("v")}, {testKey("b"), 2, []byte("w")}}
	_, err := writeSnapshot(failingWriter{}, 1, len(recs), slices.Values(recs))
	assert.ErrorIs(t, err, errDiskFull, "a failed write")
	var buf bytes.Buffer
	size, err := writeSnapshot(&buf, 1, len(recs)+1, slices.Values(recs))
	assert.Error(t, err, "fewer records than announced")
	assert.EqualValues(t, buf.Len(), size, "size written")
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// TestMemStoreWritePendingSurvivesProcess checks the edge build's promise:
// once WritePending returns, the changes are in data_dir, so an instance
// that dies without a Flush (a trap) loses none of them.
func TestMemStoreWritePendingSurvivesProcess(t *testing.T) {
	for _, keepOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepOpen=%v", keepOpen), func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 100)
			s.keepOpen = keepOpen
			kept, gone := testKey("kept"), testKey("gone")
			require.NoError(t, s.Insert(kept, []byte("v1"), future()))
			require.NoError(t, s.Insert(gone, []byte("x"), future()))
			require.NoError(t, s.WritePending())
			_, ok := s.Swap(kept, []byte("v2"), time.Time{})
			require.True(t, ok)
			s.Delete(gone)
			require.NoError(t, s.WritePending())
			// s is abandoned here, as a trapped instance would be.

			r := newTestStore(t, dir, 100)
			got, ok := r.Get(kept)
			require.True(t, ok, "an entry written by WritePending was lost")
			assert.Equal(t, "v2", string(got))
			_, ok = r.Get(gone)
			assert.False(t, ok, "a delete written by WritePending was lost")
		})
	}
}

// TestReplayLogHugeLength is a log whose record claims a length near 2^64:
// a bad or torn log, never a panic.
func TestReplayLogHugeLength(t *testing.T) {
	b := appendLogHeader(nil, 1)
	b = binary.AppendUvarint(b, 1<<64-1)
	b = append(b, make([]byte, 40)...)
	_, torn, err := replayLog(b, func(bool, Key, int64, []byte) { t.Fatal("a record passed on") }, 1)
	if !torn && err == nil {
		t.Errorf("replayLog(huge length) = torn %v, %v; want torn or an error", torn, err)
	}
}

// Sweeps visit only what the shards' expiry index says is due: checked
// against a model over random inserts and sweeps, with entries already
// expired when inserted, entries beyond the index's wheel (far), and sweeps
// that skip ahead further than the wheel spans.
func TestMemStoreSweepsEveryExpiredEntry(t *testing.T) {
	tests := []struct {
		name           string
		maxStep        int // seconds between sweeps, at most
		before, spread int // entries expire from before seconds before the next sweep, over spread seconds
	}{
		{"each second", 1, 5, 30},
		{"far ones", 37, 60, 4 * wheelSeconds},
		{"long pauses", 3 * wheelSeconds, 10, 2 * wheelSeconds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := newMemStore("", 1<<20)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(3, uint64(tt.maxStep)))
			base := time.Now().Add(time.Hour) // Insert treats entries expiring in the past as gone
			model := map[Key]time.Time{}
			now := base
			for step := range 300 {
				for range rng.IntN(40) {
					k := sha256.Sum256(fmt.Append(nil, "sweep", len(model), step, rng.Uint64()))
					exp := now.Add(time.Duration(rng.IntN(tt.spread*1000)-tt.before*1000) * time.Millisecond)
					require.NoError(t, s.Insert(k, []byte("v"), exp))
					model[k] = exp
				}
				now = now.Add(time.Duration(1+rng.IntN(tt.maxStep*1000)) * time.Millisecond)
				s.Sweep(now)
				maps.DeleteFunc(model, func(_ Key, exp time.Time) bool { return !exp.After(now) })
				require.Equal(t, len(model), s.Len(), "entries after the sweep at step %d", step)
			}
			require.NotZero(t, len(model))
		})
	}
}

// The ticker doubles early a table about to double, unless the store is
// too full for that shard ever to need it.
func TestMemStoreTickGrowsEarly(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprint("full=", full), func(t *testing.T) {
			s := newTestStore(t, "", 1<<20)
			sh := &s.shards[3]
			exp := time.Now().Add(time.Hour)
			var keys []Key
			for {
				if size, _ := sh.t.growth(0); size != 0 {
					break
				}
				keys = append(keys, keyInShard(fmt.Sprint("grow", len(keys)), 3))
				require.NoError(t, s.Insert(keys[len(keys)-1], []byte("v"), exp))
			}
			if full {
				s.maxLive = s.live.Load()
			}
			sh.seen = sh.t.n // no recent growth: only the eighth applies
			size := len(sh.t.slots)
			s.Tick(time.Now())
			want := 2 * size
			if full {
				want = size
			}
			assert.Equal(t, want, len(sh.t.slots), "slots after the tick")
			for i, k := range keys {
				_, ok := s.Get(k)
				assert.True(t, ok, "key %d after the tick", i)
			}
		})
	}
}

// TestMemStorePrefetchHint checks that the hint Prefetch reads gives the
// address of the slot where a lookup of the key starts, through every way
// a table's slots move: doubling on insert, doubling early in Tick, and
// the restore of a restart.
func TestMemStorePrefetchHint(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 1<<20)
	var keys []Key
	check := func(when string) {
		t.Helper()
		for _, k := range keys {
			sh := s.shard(k)
			want := uintptr(unsafe.Pointer(&sh.t.slots[sh.t.home(sh.t.hashOf(k))]))
			if got := s.hints[k[0]%numShards].homeAddr(k); got != want {
				t.Fatalf("%s: homeAddr(%x) = %#x; want %#x", when, k[:4], got, want)
			}
		}
	}
	for i := range numShards {
		if got := s.hints[i].homeAddr(testKey("none")); got != 0 {
			t.Fatalf("shard %d before any insert: homeAddr = %#x; want 0", i, got)
		}
	}
	for i := range 4000 { // each shard's table doubles from 64 to 256 slots
		keys = append(keys, testKey(fmt.Sprint("k", i)))
		require.NoError(t, s.Insert(keys[i], []byte("v"), future()))
		if i%500 == 0 {
			check(fmt.Sprintf("after %d inserts", i+1))
		}
	}
	check("after the inserts")
	for {
		before := len(s.shards[0].t.slots)
		s.Tick(time.Now())
		if len(s.shards[0].t.slots) == before { // resizeEarly doubles only tables near full
			keys = append(keys, keyInShard(fmt.Sprint("fill", len(keys)), 0))
			require.NoError(t, s.Insert(keys[len(keys)-1], []byte("v"), future()))
			continue
		}
		break
	}
	check("after Tick doubled a table early")
	require.NoError(t, s.Flush())
	s = newTestStore(t, dir, 1<<20)
	check("after a restart")
}

// The ticker doubles a table ahead of its eighth when, at the rate it
// filled since the previous tick, it would fill within growLeadTicks more.
func TestMemStoreTickGrowsAheadOfFastTables(t *testing.T) {
	for _, tc := range []struct {
		added  int // entries added between the two ticks
		double bool
	}{
		{added: 10, double: false}, // 176 to go of 256: 30 in three ticks
		{added: 60, double: true},  // 126 to go: 180 in three ticks
	} {
		t.Run(fmt.Sprint("added=", tc.added), func(t *testing.T) {
			s := newTestStore(t, "", 1<<20)
			sh := &s.shards[3]
			exp := time.Now().Add(time.Hour)
			insert := func(n int) {
				for range n {
					require.NoError(t, s.Insert(keyInShard(fmt.Sprint("k", sh.t.n), 3), []byte("v"), exp))
				}
			}
			insert(70)
			// The first tick sees 70 entries added: at that rate the 256
			// slots (room for 128) fill within three ticks, so it doubles
			// them, and counts from there.
			s.Tick(time.Now())
			size := len(sh.t.slots)
			require.Equal(t, 512, size, "slots after the first tick")
			insert(tc.added)
			s.Tick(time.Now())
			if doubled := len(sh.t.slots) == 2*size; doubled != tc.double {
				t.Errorf("%d entries of %d slots, %d added since the last tick: doubled = %v; want %v",
					sh.t.n, size, tc.added, doubled, tc.double)
			}
		})
	}
}

// Entries restored at start-up are no growth: the first tick after a
// restart doubles no table that is not within its eighth.
func TestMemStoreTickAfterRestartKeepsTables(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 1<<20)
	for i := range 3000 { // about 47 a shard: mostly 128 slots, 17 to go of 64
		require.NoError(t, s.Insert(testKey(fmt.Sprint("k", i)), []byte("v"), future()))
	}
	require.NoError(t, s.Flush())
	r := newTestStore(t, dir, 1<<20)
	var before [numShards]int
	var near [numShards]bool // within its eighth: may double
	for i := range r.shards {
		sh := &r.shards[i]
		before[i] = len(sh.t.slots)
		near[i] = 8*(len(sh.t.slots)/2-sh.t.n) <= len(sh.t.slots)/2
	}
	r.Tick(time.Now())
	kept := 0
	for i := range r.shards {
		sh := &r.shards[i]
		if near[i] {
			continue
		}
		kept++
		if got := len(sh.t.slots); got != before[i] {
			t.Errorf("shard %d (%d entries): %d slots after the first tick; want %d", i, sh.t.n, got, before[i])
		}
	}
	if kept < numShards/2 {
		t.Fatalf("only %d shards were not within their eighth: the test checks too little", kept)
	}
}

// Prefetch reads without a lock while inserts resize the tables: under
// -race, this shows it reads nothing unsynchronised.
func TestMemStorePrefetchDuringResizes(t *testing.T) {
	s := newTestStore(t, "", 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5000 {
			if err := s.Insert(testKey(fmt.Sprint("k", i)), []byte("v"), future()); err != nil {
				t.Error(err)
				return
			}
			if i%1000 == 0 {
				s.Tick(time.Now())
			}
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			assert.Equal(t, 5000, s.Len())
			return
		default:
			s.Prefetch(testKey(fmt.Sprint("k", i%5000)))
		}
	}
}

// TestMemStoreShrinksAfterBurst fills the store with a burst of short-lived
// entries beside a few long-lived ones: once the burst has expired, the
// tick gives back its tables' slots, keeps every live entry, and the store
// still grows.
func TestMemStoreShrinksAfterBurst(t *testing.T) {
	s := newTestStore(t, "", 1<<20)
	now := time.Now()
	val := []byte("v")
	const burst, kept = 200_000, 1000
	for i := range uint64(burst) {
		require.NoError(t, s.Insert(benchKey(i), val, now.Add(time.Second)))
	}
	for i := range uint64(kept) {
		require.NoError(t, s.Insert(benchKey(burst+i), val, now.Add(time.Hour)))
	}
	slots := func() (total int) {
		for i := range s.shards {
			total += len(s.shards[i].t.slots)
		}
		return total
	}
	before := slots()

	s.Tick(now.Add(2 * time.Second))
	require.Equal(t, kept, s.Len(), "entries after the sweep")
	after := slots()
	// 1000 entries over 64 shards: tables of minSlots, some twice that.
	if after > 2*numShards*minSlots {
		t.Errorf("slots after the burst expired = %d (%d before); want at most %d", after, before, 2*numShards*minSlots)
	}
	for i := range s.shards {
		if tab := &s.shards[i].t; 4*tab.n > len(tab.slots) && len(tab.slots) > minSlots {
			t.Errorf("shard %d: %d entries in %d slots, over a quarter full after shrinking", i, tab.n, len(tab.slots))
		}
	}
	for i := range uint64(kept) {
		if _, ok := s.Get(benchKey(burst + i)); !ok {
			t.Fatalf("entry %d lost in the shrink", i)
		}
	}
	for i := range uint64(burst) { // and it grows again
		require.NoError(t, s.Insert(benchKey(2*burst+i), val, now.Add(time.Hour)))
	}
	assert.Equal(t, kept+burst, s.Len(), "entries after growing again")
}

// TestCountReleasesLocksOnPanic: Count runs its callback under a shard's
// lock; a callback that panics must not leave the lock held, or every
// request on that shard, the ticker and the shutdown would wait forever.
func TestCountReleasesLocksOnPanic(t *testing.T) {
	s := newTestStore(t, t.TempDir(), 100)
	k := Key{7}
	require.NoError(t, s.Insert(k, []byte("v"), time.Now().Add(time.Hour)))
	func() {
		defer func() { require.NotNil(t, recover(), "the callback's panic goes on up") }()
		s.Count(func([]byte) bool { panic("boom") })
	}()
	for i := range s.shards {
		require.True(t, s.shards[i].mu.TryLock(), "shard %d is left locked", i)
		s.shards[i].mu.Unlock()
	}
	_, ok := s.Get(k)
	assert.True(t, ok)
}

// TestMemStoreSnapshotWithoutItsLog removes a shard's log beside its
// snapshot: what changed since the snapshot, a redemption say, is in
// neither, so start-up stops, naming both files, rather than start as if
// nothing had; moving the snapshot away too, as the error says, starts the
// store without that shard's entries.
func TestMemStoreSnapshotWithoutItsLog(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 100)
	k := testKey("k")
	require.NoError(t, s.Insert(k, []byte("v"), future()))
	require.NoError(t, s.Compact()) // k is in a snapshot
	_, ok := s.Swap(k, []byte("redeemed"), time.Time{})
	require.True(t, ok)
	require.NoError(t, s.Flush()) // and its change in the log
	i := int(k[0] % numShards)
	snap, logf := s.snapPaths[i], s.logPaths[i]
	require.NoError(t, os.Remove(logf))

	r, err := newMemStore(dir, 100)
	require.Error(t, err, "restored a snapshot without the log that continues it")
	assert.Nil(t, r)
	assert.Contains(t, err.Error(), logf)
	assert.Contains(t, err.Error(), filepath.Base(snap))

	require.NoError(t, os.Rename(snap, snap+".bad"))
	r = newTestStore(t, dir, 100)
	_, ok = r.Get(k)
	assert.False(t, ok, "the shard starts empty")
}

// TestCompactionCrashBeforeItsLog takes the files as a crash leaves them
// where a compaction has written a shard's new snapshot and not yet its
// new log, in a new data_dir, with entries, and in a data_dir recreated
// while running: each restores, with the snapshot's entries.
func TestCompactionCrashBeforeItsLog(t *testing.T) {
	k := testKey("k")
	for _, tt := range []struct {
		name string
		// run makes the compaction to catch, calling arm just before it.
		run     func(t *testing.T, dir string, arm func())
		wantKey bool
	}{
		{"new data_dir", func(t *testing.T, dir string, arm func()) {
			arm()
			newTestStore(t, dir, 100)
		}, false},
		{"with entries", func(t *testing.T, dir string, arm func()) {
			s := newTestStore(t, dir, 100)
			require.NoError(t, s.Insert(k, []byte("v"), future()))
			require.NoError(t, s.Flush())
			arm()
			require.NoError(t, s.Compact())
		}, true},
		{"data_dir recreated", func(t *testing.T, dir string, arm func()) {
			s := newTestStore(t, dir, 100)
			require.NoError(t, s.Insert(k, []byte("v"), future()))
			require.NoError(t, s.Flush())
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.Mkdir(dir, 0o700))
			s.rewriteAll() // as ensureDataDir does
			arm()
			require.NoError(t, s.Flush())
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			require.NoError(t, os.Mkdir(dir, 0o700))
			var crashed string // the files at the crash
			arm := func() {
				testHookSnapshotWritten = func(i int) {
					if i != int(k[0]%numShards) || crashed != "" {
						return
					}
					crashed = filepath.Join(t.TempDir(), "crash")
					require.NoError(t, os.CopyFS(crashed, os.DirFS(dir)))
				}
			}
			t.Cleanup(func() { testHookSnapshotWritten = nil })
			tt.run(t, dir, arm)
			require.NotEmpty(t, crashed, "the compaction ran")
			r, err := newMemStore(crashed, 100)
			require.NoError(t, err, "restoring what the crash left")
			_, ok := r.Get(k)
			assert.Equal(t, tt.wantKey, ok, "the snapshot's entry")
		})
	}
}

// TestMemStoreLogRemovedWhileRunning removes a shard's log under the
// running store, held open between writes (the edge build) or not: the
// next write finds it gone and writes the shard whole at once, so that
// what that write was to make durable is, and a restart finds it all.
func TestMemStoreLogRemovedWhileRunning(t *testing.T) {
	for _, keepOpen := range []bool{false, true} {
		t.Run(fmt.Sprint("keepOpen=", keepOpen), func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 100)
			s.keepOpen = keepOpen
			a, b := keyInShard("a", 5), keyInShard("b", 5)
			require.NoError(t, s.Insert(a, []byte("v"), future()))
			require.NoError(t, s.WritePending())
			require.NoError(t, os.Remove(s.logPaths[5]))
			require.NoError(t, s.Insert(b, []byte("v"), future()))
			require.NoError(t, s.WritePending(), "the write after the removal")
			assert.FileExists(t, s.logPaths[5], "written whole, with a log")

			r, err := newMemStore(dir, 100)
			require.NoError(t, err)
			for _, k := range []Key{a, b} {
				_, ok := r.Get(k)
				assert.True(t, ok, "key %x after a restart", k[:4])
			}
		})
	}
}

// TestCleanStopCatchesDamage damages a shard's log between a stop and the
// next start. After a graceful stop (MarkCleanStop) every change is
// refused, naming the file: a log cut at a record boundary, a damaged last
// record, a damaged epoch would otherwise restore without what they lost,
// and could give a used code back. After a crash (no mark) the same cut
// is what a crash leaves, and restores as before. A start removes the
// mark, so a crash after it is not taken for damage.
func TestCleanStopCatchesDamage(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	k1, k2 := keyInShard("first", 5), keyInShard("second", 5)
	for _, tt := range []struct {
		name   string
		clean  bool
		damage func(log string, before int64) // before: the log's size before k2
		ok     bool
	}{
		{"clean, untouched", true, func(string, int64) {}, true},
		{"clean, cut at a record boundary", true, func(log string, before int64) { os.Truncate(log, before) }, false},
		{"clean, last record damaged", true, func(log string, _ int64) { flipByte(t, log, -2) }, false},
		{"clean, epoch damaged (older)", true, func(log string, _ int64) { olderEpoch(t, log) }, false},
		{"clean, epoch damaged (newer)", true, func(log string, _ int64) { flipByte(t, log, len(logMagic)) }, false},
		{"clean, grown", true, func(log string, _ int64) { appendBytes(t, log, []byte{0}) }, false},
		{"crash, cut at a record boundary", false, func(log string, before int64) { os.Truncate(log, before) }, true},
		// The header's checksum, not the mark: a log that reads as older
		// than its snapshot would be skipped whole.
		{"crash, epoch damaged (older)", false, func(log string, _ int64) { olderEpoch(t, log) }, false},
		{"crash, epoch damaged (newer)", false, func(log string, _ int64) { flipByte(t, log, len(logMagic)+7) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTestStore(t, dir, 100)
			require.NoError(t, s.Insert(k1, []byte("v1"), exp))
			require.NoError(t, s.Flush())
			log := s.logPaths[5]
			before := fileSize(t, log)
			require.NoError(t, s.Insert(k2, []byte("v2"), exp))
			require.NoError(t, s.Flush())
			if tt.clean {
				require.NoError(t, s.MarkCleanStop())
			}
			tt.damage(log, before)
			s2, err := newMemStore(dir, 100)
			if !tt.ok {
				require.Error(t, err, "a start after the damage")
				assert.Contains(t, err.Error(), filepath.Base(log), "the error names the file")
				return
			}
			require.NoError(t, err)
			assert.NoFileExists(t, filepath.Join(dir, cleanStopFile), "the mark, once started")
			_, ok := s2.Get(k1)
			assert.True(t, ok, "the first entry")
			// Written to since the start, then a crash: not damage.
			require.NoError(t, s2.Insert(keyInShard("third", 5), []byte("v3"), exp))
			require.NoError(t, s2.Flush())
			_, err = newMemStore(dir, 100)
			require.NoError(t, err, "a start after a crash that followed a clean start")
		})
	}
}

// flipByte inverts the byte of the file at path at off (from the end when
// negative).
func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// olderEpoch makes the epoch in the header of the log at path one less,
// as a damaged bit can: the log then reads as one a cut compaction left.
func olderEpoch(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	e := binary.BigEndian.Uint64(b[len(logMagic):])
	require.Positive(t, e, "a log after a compaction")
	binary.BigEndian.PutUint64(b[len(logMagic):], e-1)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// appendBytes appends p to the file at path.
func appendBytes(t *testing.T, path string, p []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(p)
	require.NoError(t, errors.Join(err, f.Close()))
}

// TestLogOfEarlierBuildRead: a log in the form builds before the header's
// checksum wrote ("DLLOG1", no checksum) still restores, and the start
// rewrites it in the current form.
func TestLogOfEarlierBuildRead(t *testing.T) {
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour)
	k := keyInShard("old", 5)
	s := newTestStore(t, dir, 100)
	require.NoError(t, s.Flush()) // the snapshot, so that the put is in the log
	require.NoError(t, s.Insert(k, []byte("v"), exp))
	require.NoError(t, s.Flush())
	path := s.logPaths[5]
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, int64(len(b)), logHeaderSize, "the put is in the log")
	epoch, _, err := readLogHeader(b)
	require.NoError(t, err)
	old := binary.BigEndian.AppendUint64([]byte(logMagicV1), epoch)
	require.NoError(t, os.WriteFile(path, append(old, b[logHeaderSize:]...), 0o600))

	s2, err := newMemStore(dir, 100)
	require.NoError(t, err)
	got, ok := s2.Get(k)
	assert.True(t, ok, "the entry the old log held")
	assert.Equal(t, "v", string(got))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, logMagic, string(b[:len(logMagic)]), "the log after the start")
}

// TestWritesAroundCleanStop: the clean stop's mark covers what was
// pending when it began (a registration answered after the last Flush),
// refuses registrations from then on, and a redemption still under way
// after it is written, its write removing the mark: neither lost, nor
// taken for damage at the next start.
func TestWritesAroundCleanStop(t *testing.T) {
	dir := t.TempDir()
	exp := time.Now().Add(time.Hour)
	k, late := keyInShard("before", 5), keyInShard("late", 9)
	s := newTestStore(t, dir, 100)
	require.NoError(t, s.Insert(k, []byte("v"), exp))
	require.NoError(t, s.Flush())
	require.NoError(t, s.Insert(late, []byte("v"), exp)) // after the stop's last Flush
	require.NoError(t, s.MarkCleanStop())
	require.FileExists(t, filepath.Join(dir, cleanStopFile))

	assert.ErrorIs(t, s.Insert(keyInShard("after", 5), []byte("v"), exp), errStoreUnavailable, "a registration after the mark")
	require.NoError(t, s.WritePending()) // a request that changed nothing (the edge build writes after each)
	require.FileExists(t, filepath.Join(dir, cleanStopFile), "the mark, after a write with nothing to write")
	_, ok := s.Swap(k, []byte("used"), time.Time{}) // a redemption the stop cut off
	require.True(t, ok)
	require.NoError(t, s.Sync(k))
	assert.NoFileExists(t, filepath.Join(dir, cleanStopFile), "the mark, once a write followed it")

	s2, err := newMemStore(dir, 100)
	require.NoError(t, err, "the start after the stop")
	got, ok := s2.Get(k)
	assert.True(t, ok)
	assert.Equal(t, "used", string(got), "the redemption made after the mark")
	_, ok = s2.Get(late)
	assert.True(t, ok, "the registration pending when the stop began")
}

// TestCleanStopRewritesRemovedShard: a shard's files removed under the
// running service, with no change to it since, are written again by the
// stop: otherwise the mark would record the shard as having none, and
// the next start begin without its entries and without a word.
func TestCleanStopRewritesRemovedShard(t *testing.T) {
	for _, removed := range [][]string{{".snap", ".log"}, {".log"}, {".snap"}} {
		t.Run(strings.Join(removed, "+"), func(t *testing.T) {
			dir := t.TempDir()
			k := keyInShard("kept", 5)
			s := newTestStore(t, dir, 100)
			require.NoError(t, s.Insert(k, []byte("v"), time.Now().Add(time.Hour)))
			require.NoError(t, s.Flush())
			for _, ext := range removed {
				require.NoError(t, os.Remove(filepath.Join(dir, "store-05"+ext)))
			}
			require.NoError(t, s.MarkCleanStop())

			s2, err := newMemStore(dir, 100)
			require.NoError(t, err)
			_, ok := s2.Get(k)
			assert.True(t, ok, "the entry of the shard whose files were removed")
		})
	}
}

// TestInsertRacingCleanStop: an Insert that passed its first look at
// closing, then waited for its shard's lock while the stop wrote the
// shard and the mark, is refused under the lock rather than answered
// and left in a buffer no write takes up.
func TestInsertRacingCleanStop(t *testing.T) {
	dir := t.TempDir()
	s := newTestStore(t, dir, 100)
	testHookInsertLocking = func() {
		testHookInsertLocking = nil
		require.NoError(t, s.MarkCleanStop())
	}
	t.Cleanup(func() { testHookInsertLocking = nil })
	k := keyInShard("late", 5)
	assert.ErrorIs(t, s.Insert(k, []byte("v"), time.Now().Add(time.Hour)), errStoreUnavailable)
	_, ok := s.Get(k)
	assert.False(t, ok, "the refused entry")
}
