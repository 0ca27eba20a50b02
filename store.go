package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Key names an entry of a Store. It is always a SHA-256 of what it stands
// for (an auth code with its store, an access token), never the secret
// itself, so a leaked snapshot reveals no live code or token.
type Key [32]byte

// Store is the expiring key-value state of the sign-in flow. It is kept
// narrow on purpose: a shared backend for several replicas implements the
// same five calls. Insert and Swap copy the values passed in, which the
// caller may reuse once they return; values returned belong to the store
// and must not be modified. A store that keeps changes in memory before
// it writes them also has Sync(keys ...Key) error, to write those of the
// keys given now (memStore.Sync); the token endpoint calls it, when the
// store has it, before it answers.
type Store interface {
	// Insert stores val under k until exp. It fails with errKeyExists when a
	// live entry already holds k (that entry is left untouched), with
	// errStoreFull when the store holds its maximum of live entries, and
	// with errStoreUnavailable when it cannot persist what it would accept.
	Insert(k Key, val []byte, exp time.Time) error
	// Get returns the value of the live entry k.
	Get(k Key) (val []byte, ok bool)
	// Swap replaces the value of the live entry k with val, extends its
	// expiry to exp when that is later (a zero exp keeps it), and returns
	// the value it had. Of any number of concurrent Swaps of one key,
	// each sees the value the previous one wrote, so exactly one sees the
	// value that was first inserted. It stores nothing and returns
	// ok == false when k is not live.
	Swap(k Key, val []byte, exp time.Time) (old []byte, ok bool)
	// Extend moves the expiry of the live entry k to exp when that is
	// later, its value unchanged; it reports whether k was live.
	Extend(k Key, exp time.Time) bool
	// Delete removes k, live or not.
	Delete(k Key)
}

var (
	errKeyExists        = errors.New("store: key exists")
	errStoreFull        = errors.New("store: full")
	errStoreUnavailable = errors.New("store: cannot persist")
)

// numShards splits the map so that concurrent requests rarely share a lock.
// Keys are hashes, so their first byte spreads them evenly.
const numShards = 64

// memStore is the in-memory Store: a hash table split into shards, each
// behind its own mutex. Each shard persists as a snapshot (store-XX.snap)
// and an append-only log of the changes since (store-XX.log): Flush
// appends what changed, so a second of writes costs what was written, not
// the size of the store; once most of their records are dead, the two are
// compacted into a new snapshot (compactDue). Both files carry the shard's epoch, so a log left over
// from before a compaction is never replayed onto the newer snapshot.
type memStore struct {
	dir        string // where snapshots and logs live; "" keeps nothing on disk
	maxLive    int64
	live       atomic.Int64  // entries in the maps, expired or not until swept
	persistBad atomic.Bool   // the last write failed; writes answer 503
	closing    atomic.Bool   // MarkCleanStop has begun: Insert answers errStoreUnavailable
	failures   atomic.Uint64 // writes failed so far: a Flush during which one failed leaves persistBad set

	flushMu     sync.Mutex   // serialises writing the files (Flush, Sync, Compact); a paced Flush lets go of it between shards
	compactNext int          // the shard the next Flush offers compaction first; flushMu guards
	marked      bool         // MarkCleanStop's mark is on disk and describes the files; flushMu guards
	valsNext    atomic.Int64 // the shard the next Sweep offers value compaction first

	snapPaths, logPaths [numShards]string // each shard's files, named once

	pendingMask atomic.Uint64 // bit i: shard i has changes not yet written (numShards == 64)

	// keepOpen keeps each log open between writes, for the edge build
	// where every request writes and an open costs a host call.
	keepOpen bool
	files    [numShards]*os.File // open logs; flushMu guards

	// The shard being written as a snapshot, copied; flushMu guards.
	snapSlots  []slot
	snapChunks [][]byte

	shards [numShards]shard

	// Where each shard's table slots are, for Prefetch: apart from the
	// shards, whose cache lines inserts write (the lock first), so that
	// reading a hint never waits on another core.
	_     [64]byte
	hints [numShards]slotHint
}

type shard struct {
	mu       sync.Mutex // guards the fields below
	t        table      // the entries; holds no pointers, so the GC never scans it
	chunks   [][]byte   // the entries, back to back; see putValLocked
	used     int64      // bytes of entries (key, expiry, length, value) in chunks
	garbage  int64      // of which no entry refers to
	pending  []byte     // log records of the changes not yet written
	spare    []byte     // the other buffer of pending, empty; see flushShardLocked
	epoch    uint64     // of the shard's snapshot, and of the log that continues it
	logSize  int64      // bytes in the shard's log file
	snapSize int64      // bytes in the shard's snapshot
	dead     int64      // bytes of the snapshot, log and pending that no live entry needs
	expiring expiries   // the entries by the second they expire in, for the sweep
	fresh    bool       // the next Flush writes a whole snapshot and a new log (at start, after a failed write)
	seen     int        // t.n when resizeEarly last looked, to tell how fast the table fills
	unsynced bool       // the log was written by WritePending and not synced since
}

// Keys and values live in each shard's chunks, and the table's slots
// refer to them by position, so that no slot holds a pointer: the GC then
// skips the table whole instead of visiting every value, which under load
// with most of a million codes live took about 9 % of the CPU. Values are
// never changed in place. One that is replaced, deleted or swept becomes
// garbage, reclaimed by copying the live ones into new chunks once
// garbage is half their size (compactValsLocked); slices handed out before
// stay valid, as they keep their old chunk alive.

// valRef is the position of an entry in its shard's chunks: its key,
// its expiry (Unix ns, 8 bytes little-endian), its value's length (4
// bytes), then its value. The expiry is there rather than in the slot so
// that a slot is 16 bytes, not 32: the table is about half of what a
// million codes cost beyond their values, and is faulted in afresh at
// each doubling. (It costs 12 bytes more an entry in the chunks, and a
// read of the chunk where the slot alone was read before: by the sweep,
// for each entry due that it visits, and by Count.)
type valRef struct{ chunk, off uint32 }

const (
	keySize     = uint32(len(Key{}))
	entryHeader = keySize + 8 + 4 // key, expiry, value length
)

// entryAt decodes the entry at the start of c, a chunk from an entry's
// offset on.
func entryAt(c []byte) (k *Key, exp int64, val []byte) {
	exp = int64(binary.LittleEndian.Uint64(c[keySize:]))
	end := entryHeader + binary.LittleEndian.Uint32(c[keySize+8:])
	return (*Key)(c), exp, c[entryHeader:end:end]
}

// valChunkSize is the size of a chunk of values (a larger value gets a
// chunk of its own). A variable only so that tests can make chunks tiny.
var valChunkSize = 256 << 10

// putValLocked copies k, exp and v into sh's chunks and returns where
// they are. Values are records of a few hundred bytes (bodies are limited
// to 64 KiB), so positions fit in 32 bits. sh.mu must be held.
func (sh *shard) putValLocked(k *Key, exp int64, v []byte) valRef {
	n := int(entryHeader) + len(v)
	last := len(sh.chunks) - 1
	if last < 0 || cap(sh.chunks[last])-len(sh.chunks[last]) < n {
		sh.chunks = append(sh.chunks, make([]byte, 0, max(valChunkSize, n)))
		last++
	}
	c := sh.chunks[last]
	e := append(c, k[:]...)
	e = binary.LittleEndian.AppendUint64(e, uint64(exp))
	e = binary.LittleEndian.AppendUint32(e, uint32(len(v)))
	sh.chunks[last] = append(e, v...)
	sh.used += int64(n)
	return valRef{chunk: uint32(last), off: uint32(len(c))}
}

// entryLocked returns the entry at r: its key, its expiry, and its value,
// capped so that appending to it cannot reach its neighbours. sh.mu must
// be held to call it, not to use what it returns, which never changes.
func (sh *shard) entryLocked(r valRef) (k *Key, exp int64, val []byte) {
	return entryAt(sh.chunks[r.chunk][r.off:])
}

// valLocked returns the value at r, as entryLocked.
func (sh *shard) valLocked(r valRef) []byte {
	_, _, val := sh.entryLocked(r)
	return val
}

// expLocked returns the expiry at r (Unix ns). sh.mu must be held.
func (sh *shard) expLocked(r valRef) int64 {
	_, exp, _ := sh.entryLocked(r)
	return exp
}

// keyLocked returns the key at r. sh.mu must be held.
func (sh *shard) keyLocked(r valRef) *Key { return (*Key)(sh.chunks[r.chunk][r.off:]) }

// dropValLocked counts the entry at r as garbage, and its record on disk
// as dead. sh.mu must be held.
func (sh *shard) dropValLocked(r valRef) {
	n := uint32(len(sh.valLocked(r)))
	sh.garbage += int64(entryHeader + n)
	sh.dead += recordSize(n)
}

// compactValsLocked copies the live values into new chunks, and lets the
// old ones go, once garbage is over a chunk and over half the live values
// (so garbage adds at most half to the entries' memory: about 120 B per
// code); it reports whether it did. Each byte written is then copied about
// twice more on average (a long-lived value, at each compaction). sh.mu
// must be held.
func (sh *shard) compactValsLocked() bool {
	if sh.garbage <= int64(valChunkSize) || 2*sh.garbage <= sh.used-sh.garbage {
		return false
	}
	old := sh.chunks
	sh.chunks, sh.used, sh.garbage = nil, 0, 0
	for i := range sh.t.slots {
		if s := &sh.t.slots[i]; s.hash != 0 {
			s.ref = sh.putValLocked(entryAt(old[s.ref.chunk][s.ref.off:]))
		}
	}
	return true
}

// findLocked returns the slot of k and true, or false when k is not in
// the table (expired or not). sh.mu must be held.
func (sh *shard) findLocked(k Key) (*slot, bool) {
	if sh.t.n == 0 {
		return nil, false
	}
	i, ok := sh.t.find(k, sh.t.hashOf(k), sh.keyLocked)
	return &sh.t.slots[i], ok
}

// setLocked makes k's value val until exp, replacing any value k had.
// sh.mu must be held.
func (sh *shard) setLocked(k Key, exp int64, val []byte) {
	sh.t.ensure()
	h := sh.t.hashOf(k)
	i, ok := sh.t.find(k, h, sh.keyLocked)
	sh.placeLocked(i, ok, h, k, exp, val)
}

// placeLocked stores k (of hash h) with exp and val in slot i, where find
// left off after ensure: replacing the entry there when had, filling the
// free slot otherwise. sh.mu must be held.
func (sh *shard) placeLocked(i int, had bool, h uint64, k Key, exp int64, val []byte) {
	e := slot{hash: h, ref: sh.putValLocked(&k, exp, val)}
	if had {
		sh.dropValLocked(sh.t.slots[i].ref)
		sh.t.slots[i] = e
	} else {
		sh.t.put(i, e)
	}
	sh.expiring.add(h, exp)
}

// deleteLocked removes k, reporting whether it was there. sh.mu must be
// held.
func (sh *shard) deleteLocked(k Key) bool {
	if sh.t.n == 0 {
		return false
	}
	i, ok := sh.t.find(k, sh.t.hashOf(k), sh.keyLocked)
	if ok {
		sh.dropValLocked(sh.t.slots[i].ref)
		sh.t.remove(i)
	}
	return ok
}

// newMemStore returns a store holding at most maxLive entries, restored
// from the snapshots and logs in dir (which it creates) when there are any.
// Expired entries are not restored. A snapshot or log that cannot be read
// or is damaged is an error naming the file: the store never starts
// silently empty. Only the unfinished last record of a log, which a crash
// can leave, is dropped (with a warning).
// The store's files in its directory are named storeFilePrefix, the
// shard's number in two hex digits, then ".snap" (its snapshot) or ".log"
// (its log): store-07.snap, store-07.log.
const storeFilePrefix = "store-"

// isStoreFile reports whether name is the name of one of the store's files.
func isStoreFile(name string) bool {
	return strings.HasPrefix(name, storeFilePrefix) && (strings.HasSuffix(name, ".snap") || strings.HasSuffix(name, ".log"))
}

// hasSnapshot reports whether dir holds a snapshot of some shard.
func hasSnapshot(dir string) bool {
	snaps, _ := filepath.Glob(filepath.Join(dir, storeFilePrefix+"*.snap"))
	return len(snaps) > 0
}

// missingStoreFiles returns the paths of the store's files (every
// shard's snapshot and log, which a started store always has) missing
// from dir.
func missingStoreFiles(dir string) []string {
	var missing []string
	for i := range numShards {
		snap, log := shardPaths(dir, i)
		for _, path := range []string{snap, log} {
			if !exists(path) {
				missing = append(missing, path)
			}
		}
	}
	return missing
}

// shardPaths returns the paths of shard i's snapshot and log in dir.
func shardPaths(dir string, i int) (snap, log string) {
	base := filepath.Join(dir, fmt.Sprintf(storeFilePrefix+"%02x", i))
	return base + ".snap", base + ".log"
}

func newMemStore(dir string, maxLive int) (*memStore, error) {
	s := &memStore{dir: dir, maxLive: int64(maxLive)}
	now := time.Now().UnixNano()
	for i := range s.shards {
		s.shards[i].t = newTable()
		s.shards[i].t.setHint(&s.hints[i])
		s.shards[i].expiring = newExpiries(now)
		s.shards[i].fresh = true
		s.snapPaths[i], s.logPaths[i] = shardPaths(dir, i)
	}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	clean, err := readCleanStop(dir)
	if err == nil && clean != nil {
		err = clean.checkFiles(dir)
	}
	if err != nil {
		return nil, err
	}
	for i := range s.shards {
		if err := s.restoreShard(i, now, clean); err != nil {
			return nil, err
		}
	}
	// From here on the files change: the record of the last stop no
	// longer describes them, and must be gone, durably, before they do.
	if clean != nil {
		if err := removeDurably(filepath.Join(dir, cleanStopFile)); err != nil {
			return nil, fmt.Errorf("data_dir: %w", err)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		s.live.Add(int64(sh.t.n))
		sh.seen = sh.t.n // what was restored is no rate of growth
	}
	// Fold the logs into snapshots now, so appends never follow a torn
	// record and the next start reads little.
	if err := s.Compact(); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreShard loads shard i's snapshot and replays its log, if the log
// continues that snapshot. It runs before the store is shared, so it
// calls the shard's Locked methods without the lock. With clean, the
// record of a graceful stop, the log must be exactly as that stop left
// it: what a crash can leave (a torn last record, a log older than its
// snapshot) is then damage, and refused.
func (s *memStore) restoreShard(i int, now int64, clean *cleanStop) error {
	sh := &s.shards[i]
	snap, logf := s.snapPaths[i], s.logPaths[i]
	b, err := os.ReadFile(snap)
	haveSnap := err == nil
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("restore %s: %w", snap, err)
	default:
		sh.epoch, err = decodeSnapshot(b, func(k Key, exp int64, val []byte) {
			if exp > now {
				sh.setLocked(k, exp, val)
			} else {
				sh.dead += recordSize(uint32(len(val)))
			}
		})
		if err != nil {
			return fmt.Errorf("restore %s: %w (%s)", snap, err, withoutShard(snap, logf, clean))
		}
		sh.snapSize = int64(len(b))
	}
	b, err = os.ReadFile(logf)
	if clean != nil && (err == nil || errors.Is(err, os.ErrNotExist)) {
		if err := clean.check(i, logf, sh.epoch, b, err == nil); err != nil {
			return err
		}
	}
	switch {
	case errors.Is(err, os.ErrNotExist) && haveSnap:
		// A snapshot always has a log beside it (ensureLogLocked): this
		// one was removed, and what changed since the snapshot with it.
		return fmt.Errorf("restore %s: missing beside %s: it holds what changed since that snapshot, redemptions among them (put it back; or %s)", logf, filepath.Base(snap), withoutShard(snap, logf, clean))
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("restore %s: %w", logf, err)
	}
	_, torn, err := replayLog(b, func(put bool, k Key, exp int64, val []byte) {
		switch {
		case put && exp > now:
			sh.setLocked(k, exp, val)
		case put:
			sh.deleteLocked(k)
			sh.dead += recordSize(uint32(len(val)))
		default:
			sh.deleteLocked(k)
			sh.dead += deleteRecordSize
		}
	}, sh.epoch)
	switch {
	case clean != nil && (err != nil || torn):
		return fmt.Errorf("restore %s: damaged since the service stopped cleanly (%v; torn end: %t): restore data_dir from a backup, or move %s away to start without what this shard held", logf, err, torn, cleanStopFile)
	case errors.Is(err, errStaleLog):
		slog.Warn("store: ignoring a log older than its snapshot (a compaction was cut short)", "file", logf)
	case errors.Is(err, errNewerLog):
		return fmt.Errorf("restore %s: %w: %s is missing or older than the state it logs (put it back; or %s)", logf, err, snap, withoutShard(snap, logf, clean))
	case err != nil:
		return fmt.Errorf("restore %s: %w (%s)", logf, err, withoutShard(snap, logf, clean))
	case torn:
		slog.Warn("store: dropped the unfinished last record of a log (a crash cut it short)", "file", logf)
	}
	return nil
}

// withoutShard is the advice of a restore error for starting without a
// shard's entries: its two files away, and the cookie key with them,
// whose being there asks for every shard's files (openApp), and the
// clean stop's mark, if there is one, which asks for its log.
func withoutShard(snap, log string, clean *cleanStop) string {
	files := []string{filepath.Base(snap), filepath.Base(log), cookieKeyFile}
	if clean != nil {
		files = append(files, cleanStopFile)
	}
	last := len(files) - 1
	return fmt.Sprintf("to start without this shard's entries, move %s and %s away (link sign-ins under way then start over)", strings.Join(files[:last], ", "), files[last])
}

func (s *memStore) shard(k Key) *shard { return &s.shards[k[0]%numShards] }

// Prefetch starts loading the table slot where an Insert or a lookup of k
// begins, and returns at once, without a lock. Called as soon as k is
// known, it lets that cache miss overlap whatever the caller does before
// its Insert. With a million codes live the slot is almost never cached:
// under wrk, a profile put about 0.9 µs of each registration's 20 µs of
// CPU on that load. It is only a hint, and changes nothing.
func (s *memStore) Prefetch(k Key) {
	if addr := s.hints[k[0]%numShards].homeAddr(k); addr != 0 {
		prefetch(addr)
	}
}

// Failing reports whether writes are refused with errStoreUnavailable:
// the last write failed (until one works), or the graceful stop has begun
// (MarkCleanStop). The webhook API answers 503 then too.
func (s *memStore) Failing() bool { return s.persistBad.Load() || s.closing.Load() }

func (s *memStore) Insert(k Key, val []byte, exp time.Time) error {
	if s.persistBad.Load() || s.closing.Load() {
		return errStoreUnavailable
	}
	sh := s.shard(k)
	if testHookInsertLocking != nil {
		testHookInsertLocking()
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Again under the lock: MarkCleanStop sets closing before its last
	// write takes each shard's lock, so an Insert either lands before that
	// write, and is in it, or sees closing here.
	if s.closing.Load() {
		return errStoreUnavailable
	}
	sh.t.ensure()
	h := sh.t.hashOf(k)
	i, had := sh.t.find(k, h, sh.keyLocked)
	if had && sh.expLocked(sh.t.slots[i].ref) > time.Now().UnixNano() { // the clock only for a key that is there
		return errKeyExists
	}
	if !had && !s.reserve() {
		return errStoreFull
	}
	x := exp.UnixNano()
	sh.placeLocked(i, had, h, k, x, val) // a key that had is expired, not yet swept
	s.logLocked(sh, k, true, x, val)
	return nil
}

// testHookInsertLocking, when set by a test, runs in Insert between its
// first look at closing and the shard's lock.
var testHookInsertLocking func()

// reserve counts one more entry unless the store already holds maxLive.
// Check and count are one step: Inserts into different shards run
// concurrently, and a separate load and add let all of them pass the check.
func (s *memStore) reserve() bool {
	for {
		n := s.live.Load()
		if n >= s.maxLive {
			return false
		}
		if s.live.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *memStore) Get(k Key) ([]byte, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	e, ok := sh.findLocked(k)
	var val []byte
	var exp int64
	if ok {
		_, exp, val = sh.entryLocked(e.ref)
	}
	sh.mu.Unlock()
	if !ok || exp <= time.Now().UnixNano() {
		return nil, false
	}
	return val, true
}

func (s *memStore) Swap(k Key, val []byte, exp time.Time) ([]byte, bool) {
	return s.swap(k, val, false, exp)
}

func (s *memStore) Extend(k Key, exp time.Time) bool {
	_, ok := s.swap(k, nil, true, exp)
	return ok
}

// swap is Swap, or with keep the entry keeps its value (Extend).
func (s *memStore) swap(k Key, val []byte, keep bool, exp time.Time) ([]byte, bool) {
	now := time.Now().UnixNano()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.findLocked(k)
	if !ok {
		return nil, false
	}
	_, was, old := sh.entryLocked(e.ref)
	if was <= now {
		return nil, false
	}
	until := was
	if n := exp.UnixNano(); !exp.IsZero() && n > was {
		until = n
		sh.expiring.add(e.hash, until) // the entry's old second drops it as stale
	}
	if keep {
		if until == was {
			return old, true // nothing changes
		}
		val = old // chunks never change: old stays readable after the drop
	}
	sh.dropValLocked(e.ref)
	e.ref = sh.putValLocked(&k, until, val)
	s.logLocked(sh, k, true, until, val)
	return old, true
}

func (s *memStore) Delete(k Key) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.deleteLocked(k) {
		s.live.Add(-1)
		s.logLocked(sh, k, false, 0, nil)
		sh.dead += deleteRecordSize // needed only until the next snapshot
	}
}

// Count returns the live entries whose value satisfies keep. It visits
// every entry, so it is for scrapes, not for requests. keep runs under a
// shard's lock, which a panic in it releases all the same.
func (s *memStore) Count(keep func(val []byte) bool) int {
	now := time.Now().UnixNano()
	n := 0
	for i := range s.shards {
		n += s.shards[i].count(now, keep)
	}
	return n
}

// count is Count for one shard; it takes and releases sh.mu.
func (sh *shard) count(now int64, keep func(val []byte) bool) (n int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, e := range sh.t.slots {
		if e.hash == 0 {
			continue
		}
		if _, exp, val := sh.entryLocked(e.ref); exp > now && keep(val) {
			n++
		}
	}
	return n
}

// Len reports the entries held, including expired ones not yet swept.
func (s *memStore) Len() int { return int(s.live.Load()) }

// valCompactionsPerSweep bounds the shards whose values one Sweep
// compacts, for the reason compactionsPerFlush bounds snapshots: under an
// even load they all become due in the same second. They take turns, as
// in flush.
const valCompactionsPerSweep = 4

// Sweep removes the entries expired at now, and compacts the values of a
// few shards where garbage is due to be reclaimed. Restores skip expired entries,
// so sweeps are not logged. A sweep visits only the entries indexed as
// expiring by now (expiries), not the whole table.
func (s *memStore) Sweep(now time.Time) { s.sweep(now, nil) }

// sweep is Sweep, paced by p when it is not nil.
func (s *memStore) sweep(now time.Time, p *pacer) {
	n := now.UnixNano()
	budget, first := valCompactionsPerSweep, int(s.valsNext.Load())
	for j := range numShards {
		i := (first + j) % numShards
		sh := &s.shards[i]
		p.yield() // as in flush: let waiting requests run between shards
		sh.mu.Lock()
		s.sweepShardLocked(sh, n)
		if budget > 0 && sh.compactValsLocked() {
			budget--
			s.valsNext.Store(int64((i + 1) % numShards))
		}
		sh.mu.Unlock()
	}
}

// sweepShardLocked removes sh's entries expired at n (Unix ns), those its
// index says are due. sh.mu must be held.
func (s *memStore) sweepShardLocked(sh *shard, n int64) {
	t := &sh.t
	sh.expiring.due(n, func(h uint64, sec int64) (keep bool) {
		if len(t.slots) == 0 {
			return false
		}
		// Every entry of hash h (two keys may share one) lies between its
		// home and the next free slot.
		for i := t.home(h); t.slots[i].hash != 0; {
			if e := &t.slots[i]; e.hash == h {
				switch exp := sh.expLocked(e.ref); {
				case exp <= n:
					sh.dropValLocked(e.ref)
					t.remove(i) // may move a slot not yet seen into i: look again
					s.live.Add(-1)
					continue
				case exp/1e9 == sec:
					keep = true // expires later in this second
				}
			}
			i = t.next(i)
		}
		return keep
	})
}

// logLocked records a change of k (a put, or a delete) for the next
// write. sh is k's shard, and sh.mu must be held.
func (s *memStore) logLocked(sh *shard, k Key, put bool, exp int64, val []byte) {
	if s.dir == "" {
		return
	}
	sh.pending = appendLogRecord(sh.pending, put, k, exp, val)
	s.pendingMask.Or(1 << (k[0] % numShards))
}

// rewriteAll makes the next Flush write every shard whole: a new snapshot
// and a new log, whatever is on disk (or is no longer there).
func (s *memStore) rewriteAll() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.fresh = true
		sh.mu.Unlock()
	}
}

// Flush appends every shard's changes since the last Flush to its log and
// syncs it, compacting a shard whose log has outgrown its snapshot. A
// failure marks the store unable to persist (writes answer 503) until a
// later Flush succeeds; the changes are kept and written then.
func (s *memStore) Flush() error { return s.flush(allShards, false, true, nil) }

// WritePending appends every shard's changes to its log like Flush, but
// leaves syncing them to the next Flush: once written, they survive the
// process (a trapped wasm instance, kill -9), if not the machine. The edge
// build calls it before answering each request that changed state.
func (s *memStore) WritePending() error { return s.flush(allShards, false, false, nil) }

// Sync writes and syncs the changes of the shards that hold keys, so that
// they survive a crash of the process or of the machine, and reports
// whether that worked (a failure marks the store as Flush's does; a
// success clears nothing, as it says nothing of the other shards). It
// waits for the write of a shard under way (a paced Flush lets go
// between shards), and writes and syncs files: it is for the rare change
// that must not be lost, such as a redemption, which the token endpoint
// syncs before it answers.
func (s *memStore) Sync(keys ...Key) error {
	var mask uint64
	for _, k := range keys {
		mask |= 1 << (k[0] % numShards)
	}
	return s.flush(mask, false, true, nil)
}

// Compact writes a fresh snapshot, and starts a new log, for every shard
// whose log holds any record, is due for compaction, or must be rewritten
// whole (at start, after a failed write).
func (s *memStore) Compact() error { return s.flush(allShards, true, true, nil) }

// compactDue reports when a shard's snapshot and log, disk bytes in all,
// are folded into a new snapshot: once the dead among them, records of
// entries since replaced, deleted or swept, are over 1 MiB and twice the
// rest. A store that only grows is never rewritten, each change written
// once (folding whenever the log outgrew four times the snapshot, the
// first rule, rewrote about 1.25 bytes for each byte logged while the
// store filled, and made most of the tick's work then); a restore reads at
// most three times the live state; and with codes expiring at the pace
// they come, each byte is written about 1.5 times.
func compactDue(disk, dead int64) bool { return dead > 1<<20 && dead > 2*(disk-dead) }

// recordSize is about what the record of an entry with a value of n bytes
// takes in a snapshot or a log.
func recordSize(n uint32) int64 { return 48 + int64(n) }

// deleteRecordSize is what a delete takes in a log.
const deleteRecordSize = 1 + 1 + int64(len(Key{})) + 4

// compactionsPerFlush bounds the compactions that fall due which one Flush
// makes; the others wait for the next ones, their logs growing a little
// meanwhile. Under an even load every shard's log passes the threshold in
// the same second, and writing all 64 snapshots in one tick stalled
// requests for tens of milliseconds (with the server on one core, p99
// 15-19 ms before the bound, 13 ms with it). The shards take turns, from
// the one after the last compacted, so a busy few cannot keep the others
// waiting. Shards that must be written whole (fresh) and Compact are not
// bounded.
const compactionsPerFlush = 2

// testHookFlushPause, when set by a test, runs where a paced flush has let
// go of flushMu, before it writes shard i.
var testHookFlushPause func(i int)

// allShards selects every shard for flush.
const allShards = 1<<numShards - 1

// flush is Flush, WritePending, Sync or Compact, of the shards whose bits
// are set in only; p, when not nil, paces the work (the ticker's:
// start-up and shutdown have no requests to make room for). Compactions
// that fall due are made only when every shard is visited: Sync, on a
// request's path, never writes a snapshot it need not.
func (s *memStore) flush(only uint64, compactAll, sync bool, p *pacer) error {
	if s.dir == "" {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	return s.flushLocked(only, compactAll, sync, p)
}

// flushLocked is flush with s.flushMu held (a paced one lets go of it
// between shards, and takes it again).
func (s *memStore) flushLocked(only uint64, compactAll, sync bool, p *pacer) error {
	failures := s.failures.Load()
	var errs []error
	mask := s.pendingMask.And(^only) & only
	budget, first := compactionsPerFlush, s.compactNext
	if only != allShards {
		budget = 0
	}
	for n := range numShards {
		i := (first + n) % numShards
		// WritePending visits only the shards with changes; Flush visits
		// all, for their syncs and compactions.
		if only&(1<<i) == 0 || !compactAll && !sync && mask&(1<<i) == 0 {
			continue
		}
		// A Flush can take tens of milliseconds of system time: between
		// shards, let waiting requests run (see pacer), and a waiting
		// Sync have the lock, so that a redemption waits for one shard's
		// write at most, not the whole tick's.
		if p != nil {
			s.flushMu.Unlock()
			if testHookFlushPause != nil {
				testHookFlushPause(i)
			}
			p.yield()
			s.flushMu.Lock()
		}
		compacted, err := s.flushShardLocked(i, compactAll, sync, budget > 0, p)
		if errors.Is(err, fs.ErrNotExist) {
			// Its log is gone (removed by hand or by a cleanup job): the
			// shard, marked fresh, is written whole now, not a tick later,
			// so that what this flush was to make durable is.
			compacted, err = s.flushShardLocked(i, compactAll, sync, budget > 0, p)
		}
		if compacted {
			budget--
			s.compactNext = (i + 1) % numShards
		}
		if err != nil {
			errs = append(errs, err)
			s.pendingMask.Or(1 << i) // its changes are still pending
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		// The directory itself may have gone, taking the files of shards
		// that had nothing to write: the next Flush rewrites them all.
		s.failures.Add(1)
		s.rewriteAll()
	} else if only != allShards || s.failures.Load() != failures {
		// A Sync that worked says nothing of the other shards, and a
		// Flush during which a Sync failed may have passed the shards
		// that failed: the next Flush decides.
		return nil
	}
	if s.persistBad.Swap(err != nil) != (err != nil) {
		if err != nil {
			slog.Error("store: writing state failed; refusing writes until it works", "err", firstLine(err))
		} else {
			slog.Info("store: writing state works again")
		}
	}
	return err
}

// testHookSnapshotWritten, when set by a test, runs where a compaction has
// put shard i's new snapshot in place and not yet its new log: what a
// crash there leaves on disk.
var testHookSnapshotWritten func(i int)

// ensureLogLocked gives shard i an empty log, continuing its snapshot of
// epoch prev (or none, with prev 0, when there is no snapshot file), if
// it has no log at all: in a new or recreated data_dir, or one whose log
// was removed. A compaction then writes its snapshot, then a new log:
// with a log there first, a crash between the two leaves the snapshot
// beside an older log, which restore ignores as stale, never alone, which
// restore takes for a lost log. s.flushMu must be held.
func (s *memStore) ensureLogLocked(i int, prev uint64) error {
	if _, err := os.Stat(s.logPaths[i]); !errors.Is(err, os.ErrNotExist) {
		return nil // there is one, or the writes that follow report the error
	}
	if _, err := os.Stat(s.snapPaths[i]); errors.Is(err, os.ErrNotExist) {
		prev = 0
	}
	return writeFileAtomic(s.logPaths[i], appendLogHeader(nil, prev))
}

// flushShardLocked writes shard i's pending changes, folding its log into
// a new snapshot when it must (fresh, compactAll) or, if mayCompact, when
// that is due. It reports whether it wrote a snapshot. s.flushMu must be
// held.
func (s *memStore) flushShardLocked(i int, compactAll, sync, mayCompact bool, p *pacer) (compacted bool, err error) {
	sh := &s.shards[i]
	snapPath, logPath := s.snapPaths[i], s.logPaths[i]
	sh.mu.Lock()
	grown := sh.logSize + int64(len(sh.pending))
	compact := sh.fresh || compactAll && grown > logHeaderSize || mayCompact && compactDue(sh.snapSize+grown, sh.dead)
	if !compact && len(sh.pending) == 0 && !(sync && sh.unsynced) {
		sh.mu.Unlock()
		return false, nil
	}
	// The files are about to change: a clean stop's mark no longer
	// describes them.
	if err := s.unmarkLocked(); err != nil {
		sh.mu.Unlock()
		return false, err
	}
	if compact {
		// The snapshot is the shard as it is now: a copy of its slots,
		// and of its chunks' headers, taken under the lock, is written
		// after it. Keys and values in chunks never change, so reading
		// them needs no lock; the copies are kept for the next snapshot,
		// as building a few MiB at once had allocations stall on the GC
		// (up to 34 ms).
		s.snapSlots = append(s.snapSlots[:0], sh.t.slots...)
		s.snapChunks = append(s.snapChunks[:0], sh.chunks...)
		n, epoch, dead := sh.t.n, sh.epoch+1, sh.dead
		pending := sh.pending
		sh.pending = nil
		sh.mu.Unlock()

		var size int64
		s.closeLogLocked(i) // the log file is about to be replaced
		err = s.ensureLogLocked(i, epoch-1)
		if err == nil {
			err = writeFileWith(snapPath, p, func(w io.Writer) (err error) {
				size, err = writeSnapshot(w, epoch, n, func(yield func(snapRecord) bool) {
					for _, e := range s.snapSlots {
						if e.hash == 0 {
							continue
						}
						k, exp, val := entryAt(s.snapChunks[e.ref.chunk][e.ref.off:])
						if !yield(snapRecord{*k, exp, val}) {
							return
						}
					}
				})
				return err
			})
		}
		clear(s.snapChunks) // the chunks may be let go of meanwhile: hold on to none
		if err == nil {
			if testHookSnapshotWritten != nil {
				testHookSnapshotWritten(i)
			}
			p.yield()
			err = writeFileAtomic(logPath, appendLogHeader(nil, epoch))
		}
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if err != nil {
			// Whatever stands on disk, the next Flush writes the shard whole.
			sh.pending = append(pending, sh.pending...)
			sh.fresh = true
			return true, err
		}
		sh.epoch, sh.snapSize, sh.logSize, sh.fresh, sh.unsynced = epoch, size, logHeaderSize, false, false
		sh.dead -= dead // what died since the copy died in the new files
		return true, nil
	}
	// Changes made while data is written go to the spare buffer; the two
	// swap each time, so neither regrows from nothing every second.
	data := sh.pending
	sh.pending, sh.spare = sh.spare[:0], nil
	sh.mu.Unlock()

	err = s.appendLogLocked(i, data, sync, p)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err == nil {
		sh.spare = data[:0]
	}
	if err != nil {
		// The log may hold part of data, or be gone: the next Flush
		// writes the shard whole rather than append after a torn record.
		sh.pending = append(data, sh.pending...)
		sh.fresh = true
		return false, err
	}
	sh.logSize += int64(len(data))
	sh.unsynced = !sync
	return false, nil
}

// appendLogLocked appends data to shard i's log, and syncs it when sync is
// set, pausing between the two when p says so. The file stays open for the
// next call when keepOpen is set, and is closed otherwise. s.flushMu must
// be held.
func (s *memStore) appendLogLocked(i int, data []byte, sync bool, p *pacer) error {
	f := s.files[i]
	if f != nil && unlinked(f) {
		// Removed while held open: what is written to it now is lost
		// with it. Opened by its path again, it is found missing.
		s.closeLogLocked(i)
		f = nil
	}
	if f == nil {
		var err error
		if f, err = os.OpenFile(s.logPaths[i], os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return err
		}
		s.files[i] = f
	}
	_, err := pacedWriter{f, p}.Write(data) // pauses after each piece, so before the sync too
	if err == nil && sync {
		if err = f.Sync(); err == nil {
			dropPageCache(f) // only advice: see its comment
		}
	}
	if err != nil || !s.keepOpen {
		if cerr := s.closeLogLocked(i); err == nil {
			err = cerr
		}
	}
	return err
}

// closeLogLocked closes shard i's open log, if any. s.flushMu must be held.
func (s *memStore) closeLogLocked(i int) error {
	f := s.files[i]
	if f == nil {
		return nil
	}
	s.files[i] = nil
	return f.Close()
}

// Tick does the store's timed work: a sweep and a write of what changed.
// The app's ticker calls it every second from one goroutine (never a
// goroutine or timer per entry); in the edge build the host drives it.
func (s *memStore) Tick(now time.Time) {
	var p pacer // one run of work, paced so that requests go first
	s.sweep(now, &p)
	s.resizeEarly(&p)
	s.flush(allShards, false, true, &p)
}

// resizeEarly doubles, a little early, the tables about to double that
// the store has room to fill, and shrinks the tables a sweep has left
// mostly empty (table.shrinkSize), as after a burst of codes expired.
// Either way the new slots are allocated and mapped outside the shard's
// lock (newSlots), so the resize itself, under the lock, only moves
// slots. A table the store cannot fill (it holds its maximum, or its room
// spread over the shards would not reach the doubling) is left to double,
// if ever, when an insert needs it.
//
// A table is doubled when it is within an eighth of full, or within what
// growLeadTicks ticks would add at the rate it grew since the last one.
// The lead is counted in ticks, not seconds: under load, a tick can take
// longer than its second (its work is paced),
// and every shard needs its doubling within moments of the others: 64
// MiB of new slots at once as the store passes half a million codes, 128
// at a million. With an eighth alone, 18 of the 64 shards still doubled
// under their lock as the store passed half a million at 47,000
// registrations a second.
func (s *memStore) resizeEarly(p *pacer) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		added := sh.t.n - sh.seen
		sh.seen = sh.t.n
		grow, more := sh.t.growth(growLeadTicks * added)
		if grow != 0 && (s.maxLive-s.live.Load())/numShards < int64(more) {
			grow = 0
		}
		shrink := 0
		if grow == 0 { // a table near half full is far from a sixteenth
			shrink = sh.t.shrinkSize()
		}
		sh.mu.Unlock()
		if grow == 0 && shrink == 0 {
			continue
		}
		slots := newSlots(max(grow, shrink), p)
		sh.mu.Lock()
		if grow != 0 {
			sh.t.growInto(slots)
		} else {
			sh.t.shrinkInto(slots)
		}
		sh.mu.Unlock()
		p.yield()
	}
}

// growLeadTicks is how many ticks of growth ahead resizeEarly doubles a
// table.
const growLeadTicks = 3

// Snapshot format, one file per shard:
//
//	"DLSNAP2\n" uvarint(epoch) uvarint(count) count×(key[32] varint(exp) uvarint(len) val[len]) crc32be(all before)
//
// The checksum makes a truncated or damaged file an error, never a
// silently shorter store.
const snapMagic = "DLSNAP2\n"

type snapRecord struct {
	key Key
	exp int64
	val []byte
}

// writeSnapshot writes the snapshot of epoch holding the n records of
// recs to w, and returns its size.
func writeSnapshot(w io.Writer, epoch uint64, n int, recs iter.Seq[snapRecord]) (size int64, err error) {
	var crc uint32
	var b []byte
	put := func() { // b to w, counted and checksummed
		if err == nil {
			crc = crc32.Update(crc, crc32.IEEETable, b)
			_, err = w.Write(b)
			size += int64(len(b))
		}
		b = b[:0]
	}
	b = append(b, snapMagic...)
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, uint64(n))
	put()
	for r := range recs {
		b = append(b, r.key[:]...)
		b = binary.AppendVarint(b, r.exp)
		b = binary.AppendUvarint(b, uint64(len(r.val)))
		b = append(b, r.val...)
		put()
		n--
	}
	if err == nil && n != 0 {
		return size, fmt.Errorf("snapshot: %d records fewer than announced", n)
	}
	b = binary.BigEndian.AppendUint32(b, crc)
	put()
	return size, err
}

var errBadSnapshot = errors.New("snapshot is truncated or corrupt")

// decodeSnapshot calls fn for each record of the snapshot b, in order, and
// returns the snapshot's epoch. The values passed to fn are fresh copies.
// It returns errBadSnapshot, having called fn for no record, when b is not
// a whole, intact snapshot.
func decodeSnapshot(b []byte, fn func(k Key, exp int64, val []byte)) (epoch uint64, err error) {
	if len(b) < len(snapMagic)+2+4 || string(b[:len(snapMagic)]) != snapMagic {
		return 0, errBadSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return 0, errBadSnapshot
	}
	p := body[len(snapMagic):]
	epoch, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, errBadSnapshot
	}
	p = p[n:]
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)/(len(Key{})+2)) {
		return 0, errBadSnapshot
	}
	p = p[n:]
	// First pass checks the framing, so fn sees all records or none.
	q := p
	for range count {
		if len(q) < len(Key{}) {
			return 0, errBadSnapshot
		}
		q = q[len(Key{}):]
		if _, n := binary.Varint(q); n <= 0 {
			return 0, errBadSnapshot
		} else {
			q = q[n:]
		}
		l, n := binary.Uvarint(q)
		if n <= 0 || l > uint64(len(q)-n) {
			return 0, errBadSnapshot
		}
		q = q[n+int(l):]
	}
	if len(q) != 0 {
		return 0, errBadSnapshot
	}
	vals := make([]byte, 0, len(p)) // one allocation backs every value
	for range count {
		var k Key
		copy(k[:], p)
		p = p[len(k):]
		exp, n := binary.Varint(p)
		p = p[n:]
		l, n := binary.Uvarint(p)
		p = p[n:]
		start := len(vals)
		vals = append(vals, p[:l]...)
		p = p[l:]
		fn(k, exp, vals[start:len(vals):len(vals)])
	}
	return epoch, nil
}

// Log format, one file per shard, continuing the snapshot of the same
// epoch:
//
//	"DLLOG2\n\x00" epoch(8, big-endian) crc32be(magic and epoch) then records:
//	uvarint(len) payload[len] crc32be(payload)
//	payload: 'P' key[32] varint(exp) val…   a put
//	         'D' key[32]                     a delete
//
// The header's checksum tells a damaged epoch from an older one: a log
// older than its snapshot, which a cut compaction leaves, is skipped, so an
// epoch damaged to a smaller number would otherwise drop the whole log
// without a word. Logs of builds before it ("DLLOG1\n\x00", no checksum)
// are still read; the start rewrites them in this form.
const (
	logMagic   = "DLLOG2\n\x00"
	logMagicV1 = "DLLOG1\n\x00"
)

const logHeaderSize = int64(len(logMagic) + 8 + 4)

func appendLogHeader(b []byte, epoch uint64) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint64(append(b, logMagic...), epoch)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
}

// readLogHeader returns the epoch of log b and the size of its header, or
// errBadLog when b does not start with a whole, undamaged header.
func readLogHeader(b []byte) (epoch uint64, size int, err error) {
	const v1Size = len(logMagicV1) + 8
	switch {
	case len(b) >= int(logHeaderSize) && string(b[:len(logMagic)]) == logMagic:
		size = int(logHeaderSize)
		if crc32.ChecksumIEEE(b[:size-4]) != binary.BigEndian.Uint32(b[size-4:]) {
			return 0, 0, errBadLog
		}
	case len(b) >= v1Size && string(b[:len(logMagicV1)]) == logMagicV1:
		size = v1Size
	default:
		return 0, 0, errBadLog
	}
	return binary.BigEndian.Uint64(b[len(logMagic):]), size, nil
}

var (
	errStaleLog = errors.New("log continues an older snapshot")
	// A log is written after its snapshot, the directory synced between:
	// one newer than its snapshot means the snapshot went missing or was
	// replaced by an older copy, and its entries are not in the log.
	errNewerLog = errors.New("log continues a newer snapshot than the one there")
)

func appendLogRecord(b []byte, put bool, k Key, exp int64, val []byte) []byte {
	n := 1 + len(k)
	if put {
		n += uvarintLen(uint64(exp)<<1^uint64(exp>>63)) + len(val)
	}
	b = binary.AppendUvarint(b, uint64(n))
	start := len(b)
	if put {
		b = append(b, 'P')
		b = append(b, k[:]...)
		b = binary.AppendVarint(b, exp)
		b = append(b, val...)
	} else {
		b = append(b, 'D')
		b = append(b, k[:]...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:]))
}

var errBadLog = errors.New("log is corrupt")

// replayLog calls fn for each record of the log b, in order. It returns
// errStaleLog or errNewerLog, calling fn for none, when the log continues
// an older or a newer snapshot than that of epoch want, and errBadLog when a whole record is damaged
// (after calling fn for the records before it: the caller gives up). An
// unfinished last record, which a crash mid-write leaves, is reported as
// torn and not passed on.
func replayLog(b []byte, fn func(put bool, k Key, exp int64, val []byte), want uint64) (epoch uint64, torn bool, err error) {
	epoch, hdr, err := readLogHeader(b)
	switch {
	case err != nil:
		return 0, false, err
	case epoch < want:
		return epoch, false, errStaleLog
	case epoch > want:
		return epoch, false, errNewerLog
	}
	p := b[hdr:]
	for len(p) > 0 {
		l, n := binary.Uvarint(p)
		switch {
		case n < 0:
			return epoch, false, errBadLog
		case n == 0 || len(p)-n < 4 || l > uint64(len(p)-n-4): // compared so that no sum can wrap
			return epoch, true, nil // the last record was cut short
		case l < 1+uint64(len(Key{})):
			return epoch, false, errBadLog
		}
		payload := p[n : n+int(l)]
		if crc32.ChecksumIEEE(payload) != binary.BigEndian.Uint32(p[n+int(l):]) {
			if len(p) == n+int(l)+4 {
				return epoch, true, nil // the last record was cut short
			}
			return epoch, false, errBadLog
		}
		p = p[n+int(l)+4:]
		var k Key
		copy(k[:], payload[1:])
		switch rest := payload[1+len(k):]; payload[0] {
		case 'P':
			exp, m := binary.Varint(rest)
			if m <= 0 {
				return epoch, false, errBadLog
			}
			fn(true, k, exp, append([]byte(nil), rest[m:]...))
		case 'D':
			if len(rest) != 0 {
				return epoch, false, errBadLog
			}
			fn(false, k, 0, nil)
		default:
			return epoch, false, errBadLog
		}
	}
	return epoch, false, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory: written, synced, renamed over path, mode 0600. A reader sees
// the old file or the new one, never a mix.
func writeFileAtomic(path string, data []byte) error {
	return writeFileWith(path, nil, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// writeFileWith is writeFileAtomic for what write writes. With a pacer,
// for background work, the file is written in pieces of pacedPiece bytes,
// and p may pause the work after each.
func writeFileWith(path string, p *pacer, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if p == nil {
		err = write(f)
	} else {
		bw := bufio.NewWriterSize(pacedWriter{f, p}, pacedPiece)
		if err = write(bw); err == nil {
			err = bw.Flush()
		}
	}
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		if err = f.Sync(); err == nil {
			dropPageCache(f) // only advice: see its comment
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // make the rename itself durable; not every platform supports it
		d.Close()
	}
	return nil
}

// pacedPiece is the most a pacedWriter writes in one system call. Copying
// a few MiB into the page cache took this machine up to 12 ms in one call,
// which no other goroutine could interrupt where the service has one core.
const pacedPiece = 256 << 10

// pacedWriter writes to f in pieces of at most pacedPiece bytes, letting p
// pause the work after each (p may be nil).
type pacedWriter struct {
	f *os.File
	p *pacer
}

func (w pacedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n, err := w.f.Write(b[:min(len(b), pacedPiece)])
		written += n
		if err != nil {
			return written, err
		}
		b = b[n:]
		w.p.yield()
	}
	return written, nil
}

// cleanStopFile records, at a graceful stop, each shard log's epoch and
// length (MarkCleanStop). A log that is then not exactly so at the next
// start was changed at rest, not cut by a crash: a log cut at a record
// boundary would otherwise restore without its last records, a damaged
// last record would be dropped as a crash's torn end, and a damaged epoch
// make the log read as one a cut compaction left. Any of these can give a
// used code back. It is removed at start, before anything is written, so
// after a crash there is none, and what a crash leaves is taken as before.
const cleanStopFile = "store.clean"

// cleanStop is cleanStopFile's content: per shard, its log's epoch and
// length, -1 for no log; and the service's other files of the state that
// were there (MarkCleanStop's caller names them), each of which must
// still be. Marks of earlier builds name none.
type cleanStop struct {
	Logs [numShards]struct {
		Epoch uint64 `json:"epoch"`
		Size  int64  `json:"size"`
	} `json:"logs"`
	Files []string `json:"files,omitempty"`
}

// readCleanStop reads dir's cleanStopFile, or returns nil without one.
func readCleanStop(dir string) (*cleanStop, error) {
	path := filepath.Join(dir, cleanStopFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var c cleanStop
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w (move it away to start without the check it allows)", path, err)
	}
	return &c, nil
}

// check reports a difference between shard i's log (log, its content,
// if exists; of the snapshot's epoch) and c.
func (c *cleanStop) check(i int, path string, epoch uint64, log []byte, exists bool) error {
	want := c.Logs[i]
	size := int64(len(log))
	if !exists {
		size = -1
	}
	if size != want.Size || exists && epoch != want.Epoch {
		return fmt.Errorf("restore %s: changed since the service stopped cleanly (%d bytes of epoch %d; it stopped with %d of epoch %d): restore data_dir from a backup, or move %s away to start without the check", path, size, epoch, want.Size, want.Epoch, cleanStopFile)
	}
	return nil
}

// checkFiles reports a file of c.Files missing from dir.
func (c *cleanStop) checkFiles(dir string) error {
	for _, name := range c.Files {
		if path := filepath.Join(dir, name); !exists(path) {
			return fmt.Errorf("restore %s: missing, though it was there when the service stopped cleanly (%s): restore data_dir from a backup, or move %s away to start without the check, and without what the file held", path, cleanStopFile, cleanStopFile)
		}
	}
	return nil
}

// MarkCleanStop writes what is pending, then cleanStopFile for the
// store's files as they are, and for those of others (names in the
// store's directory) that are there. It is for a graceful stop, and
// begins it (BeginStop) if that was not done. Changes to entries there
// already, as a redemption the stop cut off and still running makes,
// are still taken (the code is used up; the session's Insert is refused,
// so the client is answered 503), and the first write of one removes the
// mark (unmarkLocked): it is neither lost nor taken for damage at the
// next start.
func (s *memStore) MarkCleanStop(others ...string) error {
	if s.dir == "" {
		return nil
	}
	s.BeginStop()
	s.flushMu.Lock() // no write between the files' lengths and the mark
	defer s.flushMu.Unlock()
	if s.marked {
		return nil // a stop retried
	}
	// A shard's files removed under the running service (by hand, a
	// cleanup job) are written again at its next change; one with none
	// since would be marked as having none, and the next start begin
	// without its entries. The stop writes such a shard whole.
	for i := range s.shards {
		if !exists(s.snapPaths[i]) || !exists(s.logPaths[i]) {
			slog.Warn("store: a shard's files have disappeared from data_dir; writing them again", "file", s.logPaths[i])
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.fresh = true
			sh.mu.Unlock()
		}
	}
	if err := s.flushLocked(allShards, false, true, nil); err != nil {
		return err
	}
	var c cleanStop
	for _, name := range others {
		_, err := os.Stat(filepath.Join(s.dir, name))
		switch {
		case err == nil:
			c.Files = append(c.Files, name)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		c.Logs[i].Epoch = sh.epoch
		sh.mu.Unlock()
		fi, err := os.Stat(s.logPaths[i])
		switch {
		case errors.Is(err, fs.ErrNotExist):
			c.Logs[i].Size = -1
		case err != nil:
			return err
		default:
			c.Logs[i].Size = fi.Size()
		}
	}
	b, err := json.Marshal(&c)
	if err == nil {
		err = writeFileAtomic(filepath.Join(s.dir, cleanStopFile), b)
	}
	if err != nil {
		return err
	}
	s.marked = true
	return nil
}

// BeginStop makes Insert answer errStoreUnavailable, and Failing true,
// from now on: the graceful stop's writes begin, and a registration after
// them would be answered 200 and dropped by the exit. MarkCleanStop
// begins so; the app calls it before its other last writes, the webhook
// state's, so that the webhook API refuses changes from then on too.
func (s *memStore) BeginStop() { s.closing.Store(true) }

// exists reports whether there is a file at path; when it cannot tell, it
// says yes, and the write that follows reports the error.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// unmarkLocked removes the clean stop's mark, if there is one, before a
// write changes the files it describes: the next start then takes them as
// a crash left them. s.flushMu must be held.
func (s *memStore) unmarkLocked() error {
	if !s.marked {
		return nil
	}
	if err := removeDurably(filepath.Join(s.dir, cleanStopFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("data_dir: a write after the graceful stop's mark, which cannot be removed: %w", err)
	}
	s.marked = false
	slog.Warn("store: a request the stop cut off wrote after the state was marked as written; the mark is removed, so the next start cannot hold the logs to it")
	return nil
}

// removeDurably removes path and syncs its directory, so that the removal
// outlives a crash.
func removeDurably(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
