package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
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
// same five calls. Values passed in and returned are owned by the store
// and must not be modified.
type Store interface {
	// Insert stores val under k until exp. It fails with errKeyExists when a
	// live entry already holds k (that entry is left untouched), with
	// errStoreFull when the store holds its maximum of live entries, and
	// with errStoreUnavailable when it cannot persist what it would accept.
	Insert(k Key, val []byte, exp time.Time) error
	// Get returns the value of the live entry k.
	Get(k Key) (val []byte, ok bool)
	// Swap replaces the value of the live entry k with val, keeping its
	// expiry, and returns the value it had. Of any number of concurrent
	// Swaps of one key, each sees the value the previous one wrote, so
	// exactly one sees the value that was first inserted. It stores
	// nothing and returns ok == false when k is not live.
	Swap(k Key, val []byte) (old []byte, ok bool)
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

// memStore is the in-memory Store: a map split into shards, each behind its
// own mutex, swept and snapshotted to dir by Tick.
type memStore struct {
	dir        string // where snapshots live; "" keeps nothing on disk
	maxLive    int64
	live       atomic.Int64 // entries in the maps, expired or not until swept
	persistBad atomic.Bool  // the last snapshot failed; writes answer 503

	flushMu sync.Mutex // serialises Flush, so two never write one file

	shards [numShards]shard
}

type shard struct {
	mu    sync.Mutex // guards the fields below
	m     map[Key]entry
	dirty bool // changed since the last snapshot

	_ [40]byte // keeps neighbouring shards' locks off one cache line
}

type entry struct {
	exp int64 // unix nanoseconds; the entry is gone from this instant
	val []byte
}

// newMemStore returns a store holding at most maxLive entries, restored
// from the snapshots in dir (which it creates) when there are any. Expired
// entries are not restored. A snapshot that cannot be read or decoded is an
// error naming the file: the store never starts silently empty.
func newMemStore(dir string, maxLive int) (*memStore, error) {
	s := &memStore{dir: dir, maxLive: int64(maxLive)}
	for i := range s.shards {
		s.shards[i].m = make(map[Key]entry)
	}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "store-*.snap"))
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w", f, err)
		}
		err = decodeSnapshot(b, func(k Key, exp int64, val []byte) {
			if exp <= now {
				return
			}
			sh := s.shard(k)
			if _, dup := sh.m[k]; !dup {
				s.live.Add(1)
			}
			sh.m[k] = entry{exp: exp, val: val}
		})
		if err != nil {
			return nil, fmt.Errorf("restore %s: %w (move the file away to start without it)", f, err)
		}
	}
	return s, nil
}

func (s *memStore) shard(k Key) *shard { return &s.shards[k[0]%numShards] }

func (s *memStore) Insert(k Key, val []byte, exp time.Time) error {
	if s.persistBad.Load() {
		return errStoreUnavailable
	}
	now := time.Now().UnixNano()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, had := sh.m[k]
	if had && old.exp > now {
		return errKeyExists
	}
	if !had && !s.reserve() {
		return errStoreFull
	}
	sh.m[k] = entry{exp: exp.UnixNano(), val: val}
	sh.dirty = true
	return nil
}

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
	e, ok := sh.m[k]
	sh.mu.Unlock()
	if !ok || e.exp <= time.Now().UnixNano() {
		return nil, false
	}
	return e.val, true
}

func (s *memStore) Swap(k Key, val []byte) ([]byte, bool) {
	now := time.Now().UnixNano()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	if !ok || e.exp <= now {
		return nil, false
	}
	sh.m[k] = entry{exp: e.exp, val: val}
	sh.dirty = true
	return e.val, true
}

func (s *memStore) Delete(k Key) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[k]; ok {
		delete(sh.m, k)
		s.live.Add(-1)
		sh.dirty = true
	}
}

// Len reports the entries held, including expired ones not yet swept.
func (s *memStore) Len() int { return int(s.live.Load()) }

// Sweep removes the entries expired at now. Restores skip expired entries,
// so a sweep alone does not make a shard dirty.
func (s *memStore) Sweep(now time.Time) {
	n := now.UnixNano()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.exp <= n {
				delete(sh.m, k)
				s.live.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// Flush writes every shard changed since its last snapshot to dir,
// atomically per shard. A failure marks the store unable to persist (writes
// answer 503) until a later Flush succeeds.
func (s *memStore) Flush() error {
	if s.dir == "" {
		return nil
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var errs []error
	var recs []snapRecord
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if !sh.dirty {
			sh.mu.Unlock()
			continue
		}
		recs = recs[:0]
		for k, e := range sh.m {
			recs = append(recs, snapRecord{k, e.exp, e.val}) // values are never mutated, so sharing them is safe
		}
		sh.dirty = false
		sh.mu.Unlock()

		path := filepath.Join(s.dir, fmt.Sprintf("store-%02x.snap", i))
		if err := writeFileAtomic(path, encodeSnapshot(recs)); err != nil {
			errs = append(errs, err)
			sh.mu.Lock()
			sh.dirty = true
			sh.mu.Unlock()
		}
	}
	err := errors.Join(errs...)
	if s.persistBad.Swap(err != nil) != (err != nil) {
		if err != nil {
			slog.Error("store: snapshot failed; refusing writes until it works", "err", err)
		} else {
			slog.Info("store: snapshots work again")
		}
	}
	return err
}

// Tick does the store's timed work: a sweep and a snapshot of what changed.
// The native server calls it every second from one goroutine (never a
// goroutine or timer per entry); the wasm host drives it from outside.
func (s *memStore) Tick(now time.Time) {
	s.Sweep(now)
	s.Flush()
}

// Run calls Tick every interval until ctx is done.
func (s *memStore) Run(done <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			s.Tick(now)
		}
	}
}

// Snapshot format, one file per shard:
//
//	"DLSNAP1\n" uvarint(count) count×(key[32] varint(exp) uvarint(len) val[len]) crc32be(all before)
//
// The checksum makes a truncated or damaged file an error, never a
// silently shorter store.
const snapMagic = "DLSNAP1\n"

type snapRecord struct {
	key Key
	exp int64
	val []byte
}

func encodeSnapshot(recs []snapRecord) []byte {
	n := len(snapMagic) + binary.MaxVarintLen64 + 4
	for _, r := range recs {
		n += len(r.key) + 2*binary.MaxVarintLen64 + len(r.val)
	}
	b := make([]byte, 0, n)
	b = append(b, snapMagic...)
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = append(b, r.key[:]...)
		b = binary.AppendVarint(b, r.exp)
		b = binary.AppendUvarint(b, uint64(len(r.val)))
		b = append(b, r.val...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

var errBadSnapshot = errors.New("snapshot is truncated or corrupt")

// decodeSnapshot calls fn for each record of the snapshot b, in order. The
// values passed to fn are fresh copies. It returns errBadSnapshot, having
// called fn for no record, when b is not a whole, intact snapshot.
func decodeSnapshot(b []byte, fn func(k Key, exp int64, val []byte)) error {
	if len(b) < len(snapMagic)+1+4 || string(b[:len(snapMagic)]) != snapMagic {
		return errBadSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return errBadSnapshot
	}
	p := body[len(snapMagic):]
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)/(len(Key{})+2)) {
		return errBadSnapshot
	}
	p = p[n:]
	// First pass checks the framing, so fn sees all records or none.
	q := p
	for range count {
		if len(q) < len(Key{}) {
			return errBadSnapshot
		}
		q = q[len(Key{}):]
		if _, n := binary.Varint(q); n <= 0 {
			return errBadSnapshot
		} else {
			q = q[n:]
		}
		l, n := binary.Uvarint(q)
		if n <= 0 || l > uint64(len(q)-n) {
			return errBadSnapshot
		}
		q = q[n+int(l):]
	}
	if len(q) != 0 {
		return errBadSnapshot
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
	return nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory: written, synced, renamed over path, mode 0600. A reader sees
// the old file or the new one, never a mix.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
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
