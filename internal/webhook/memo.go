package webhook

import (
	"bytes"
	"context"
	"sync"

	"deeplink/internal/store"
)

// endpointMemo remembers the decoding of endpoint records: each is read
// at each publish to its store and twice at each attempt to it, and seldom
// changes, and decoding them was a tenth of a delivery's CPU.
//
// It is not a cache of state. Every read still gets the record's bytes
// from the store, and a decoding is used only for the very bytes it was
// made from, so no two processes, and no two reads, can disagree through
// it: what they see is what the store holds.
var endpointMemo = recordMemo{limit: 1 << 20}

// recordMemo maps endpoint records' keys to their bytes and the Endpoints
// they decode to, in two generations of up to limit bytes of records
// each: when the newer is full, it becomes the older, and the older goes.
type recordMemo struct {
	limit int

	mu       sync.Mutex // guards the fields below
	new, old map[string]memoEntry
	newBytes int
}

type memoEntry struct {
	raw []byte
	v   *Endpoint // never handed out: callers get a clone
}

// read reads the record key: its bytes, and the Endpoint they decode to,
// the caller's to change.
func (m *recordMemo) read(ctx context.Context, st store.Store, key string) ([]byte, *Endpoint, error) {
	raw, err := st.Get(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	v, err := m.decode(key, raw)
	return raw, v, err
}

// decode returns the Endpoint raw, the record key as read from the store,
// decodes to, the caller's to change: remembered when key's record was
// last decoded from these very bytes, and remembered from now on.
func (m *recordMemo) decode(key string, raw []byte) (*Endpoint, error) {
	m.mu.Lock()
	en, ok := m.new[key]
	if !ok {
		en, ok = m.old[key]
	}
	m.mu.Unlock() // an entry never changes once made
	if ok && bytes.Equal(en.raw, raw) {
		return en.v.clone(), nil
	}
	v, err := decodeRecord[Endpoint](key, raw)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.new == nil || m.newBytes+len(raw) > m.limit {
		m.old, m.new, m.newBytes = m.new, make(map[string]memoEntry), 0
	}
	m.new[key] = memoEntry{raw: bytes.Clone(raw), v: v.clone()}
	m.newBytes += len(raw)
	return v, nil
}

// listMemo remembers, for each store, the last list of its endpoints a
// publish read (its bytes, and the ids in it), so that the next publish
// reads the records of those endpoints in the same call as the list: on
// Redis, one round trip of a publish's three.
//
// It is a guess of which keys to read, not a cache of state: a publish
// uses the records it read with the list only when the list read in that
// call is the one the guess was made from, byte for byte; otherwise it
// reads the records of the list it read, in a second call. So what a
// publish decides is from what the store holds then, as without it, and
// no two processes can disagree through it.
var listMemo = idsMemo{limit: 1 << 12}

// idsMemo maps store ids to the list of endpoints last read for them. It
// holds up to limit stores, and forgets them all when one more comes.
type idsMemo struct {
	limit int

	mu sync.Mutex // guards m
	m  map[string]listed
}

type listed struct {
	raw []byte   // the list's record; nil: none
	ids []string // the ids in it; never changed once remembered
}

// get returns the list last remembered for the store (none: nil fields).
func (m *idsMemo) get(storeID string) listed {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[storeID]
}

// put remembers that the store's list read as raw, holding ids (both
// the memo's from then on).
func (m *idsMemo) put(storeID string, raw []byte, ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= m.limit {
		m.m = make(map[string]listed)
	}
	m.m[storeID] = listed{raw: raw, ids: ids}
}
