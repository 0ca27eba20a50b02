package main

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// A shard's index: an open-addressing hash table with linear probing, in
// place of a Go map. With most of a million codes live, the map lookup of
// every registration missed the CPU caches several times over (the swiss
// table's control word, then the slot, then the slot of the assignment,
// in groups near seven-eighths full); a profile under wrk put about a
// microsecond a registration there. Here a slot is 16 bytes, four to a
// cache line, the table is at most half full, and a lookup of a key that
// is not there usually reads one line. The keys themselves live with the
// values in the shard's chunks, with their expiries, read only when a
// slot's hash matches.
//
// Hashes are seeded per shard (hash/maphash), so that nobody can choose
// codes whose keys pile up in one run of slots.

// slot is one place in a table.
type slot struct {
	hash uint64 // the key's hash with its lowest bit set; 0 marks a free slot
	ref  valRef // where the key, expiry and value are in the shard's chunks
}

// minSlots is the size of a new table.
const minSlots = 64

type table struct {
	slots []slot // len is a power of two, or 0 before the first set
	n     int    // slots in use, at most half of them
	shift uint8  // 64 - log2(len(slots)): a hash's top bits are its home slot
	seed  maphash.Seed
	hint  *slotHint // told where slots are whenever they move; may be nil
}

func newTable() table { return table{seed: maphash.MakeSeed()} }

// slotHint tells readers that do not hold the table's lock where its home
// slot for a key is, so that they can prefetch it (memStore.Prefetch). Its
// answer may be out of date: base and shift are stored one after the
// other, so a reader racing with a resize can pair one table's base with
// the other's shift, and the slots are published before they are filled.
// The address is then wrong or early, which costs a prefetch nothing: it
// is never dereferenced.
type slotHint struct {
	base  atomic.Uintptr // the address of slots[0]; 0 while there are none
	shift atomic.Uint32
	seed  maphash.Seed // the table's, which never changes
}

// setHint makes t keep h up to date from now on.
func (t *table) setHint(h *slotHint) {
	h.seed = t.seed
	t.hint = h
	t.publish()
}

// publish tells t's hint, if it has one, where t's slots are now.
func (t *table) publish() {
	if t.hint == nil || len(t.slots) == 0 {
		return
	}
	t.hint.base.Store(uintptr(unsafe.Pointer(&t.slots[0])))
	t.hint.shift.Store(uint32(t.shift))
}

// homeAddr returns the address of k's home slot, as of the last publish,
// or 0 before the table has slots.
func (h *slotHint) homeAddr(k Key) uintptr {
	base := h.base.Load()
	if base == 0 {
		return 0
	}
	home := (maphash.Comparable(h.seed, k) | 1) >> h.shift.Load()
	return base + uintptr(home)*unsafe.Sizeof(slot{})
}

// hashOf returns k's hash as slots hold it.
func (t *table) hashOf(k Key) uint64 { return maphash.Comparable(t.seed, k) | 1 }

// home is the slot where a probe for hash h starts.
func (t *table) home(h uint64) int { return int(h >> t.shift) }

// next is the slot after i, wrapping around.
func (t *table) next(i int) int { return (i + 1) & (len(t.slots) - 1) }

// find returns the slot holding k, whose hash is h, and true; or the free
// slot where k would go, and false. keyAt returns the key of a used slot.
// The table must have a free slot, as it always has once it has any.
func (t *table) find(k Key, h uint64, keyAt func(valRef) *Key) (int, bool) {
	for i := t.home(h); ; i = t.next(i) {
		switch s := &t.slots[i]; {
		case s.hash == 0:
			return i, false
		case s.hash == h && *keyAt(s.ref) == k:
			return i, true
		}
	}
}

// put fills the free slot i, which find returned after ensure.
func (t *table) put(i int, s slot) {
	t.slots[i] = s
	t.n++
}

// ensure makes room for one more slot, doubling the table when it would
// be over half full. It must be called before find when a put may follow.
func (t *table) ensure() {
	if len(t.slots) == 0 {
		t.resize(minSlots)
	} else if 2*(t.n+1) > len(t.slots) {
		t.resize(2 * len(t.slots))
	}
}

// growth returns the size of the table's next doubling, and how many more
// entries would bring it about, when that is within an eighth of the
// entries it can hold or within soon entries (what the caller expects to
// be added before it looks again); otherwise 0, 0. The caller may then
// double it early (newSlots outside any lock, then growInto).
func (t *table) growth(soon int) (size, more int) {
	more = len(t.slots)/2 - t.n
	if len(t.slots) == 0 || 8*more > len(t.slots)/2 && more > soon {
		return 0, 0
	}
	return 2 * len(t.slots), more
}

// growInto moves every slot into slots, from newSlots, unless the table
// has changed size since growth asked for them.
func (t *table) growInto(slots []slot) {
	if len(slots) == 2*len(t.slots) {
		t.moveInto(slots)
	}
}

// newSlots returns n free slots whose memory is already in place. A
// fresh slice's pages are mapped only at their first write, and on this
// host's VM those page faults were most of a doubling's cost: 0.34 s of
// 8 s under load as the store passed half a million codes, all of it in
// shard locks, every shard doubling within moments of the others. The
// faults still cost that much, so p paces them (nil: no pauses).
func newSlots(n int, p *pacer) []slot {
	s := make([]slot, n)
	const perPage = 4096 / int(unsafe.Sizeof(slot{})) // slots in a page
	for i := 0; i < n; i += perPage {
		s[i].hash = 0 // the first write maps the page
		if i%(64*perPage) == 0 {
			p.yield()
		}
	}
	return s
}

// shrinkSize returns the size to move the table into once it holds no more
// than a sixteenth of its slots, as after a burst of entries expired: the
// smallest power of two, at least minSlots, at most a quarter full with
// them; otherwise 0. Tables otherwise never shrink, and a burst's slots
// would be kept for good. The caller may then shrink it (newSlots outside
// any lock, then shrinkInto). A shrunk table, at most a quarter full, is
// far from both thresholds: it doubles again only as its entries grow
// back towards half of it (or fast enough for growth to ask early).
func (t *table) shrinkSize() int {
	if len(t.slots) <= minSlots || 16*t.n > len(t.slots) {
		return 0
	}
	size := minSlots
	for size < 4*t.n {
		size *= 2
	}
	return size
}

// shrinkInto moves every slot into slots, from newSlots, unless the table
// has changed size since shrinkSize asked for them or slots would now be
// over a quarter full.
func (t *table) shrinkInto(slots []slot) {
	if len(slots) < len(t.slots) && 4*t.n <= len(slots) {
		t.moveInto(slots)
	}
}

// resize moves every slot into a new table of size slots, a power of two.
func (t *table) resize(size int) { t.moveInto(make([]slot, size)) }

// moveInto moves every slot into slots, free, of a power-of-two length.
func (t *table) moveInto(slots []slot) {
	old := t.slots
	t.slots = slots
	t.shift = uint8(64 - bits.Len(uint(len(slots)-1)))
	t.publish()
	for _, s := range old {
		if s.hash == 0 {
			continue
		}
		i := t.home(s.hash)
		for t.slots[i].hash != 0 {
			i = t.next(i)
		}
		t.slots[i] = s
	}
}

// remove frees slot i, moving back the slots after it that would
// otherwise no longer be found (Knuth's algorithm R: no tombstones, so
// lookups never slow down with deletions). A slot after i may so move into
// i: a loop removing as it walks must look at i again.
func (t *table) remove(i int) {
	for j := t.next(i); t.slots[j].hash != 0; j = t.next(j) {
		// The slot at j may move to i unless its home lies cyclically in
		// (i, j]: then a probe from there would no longer pass i.
		h := t.home(t.slots[j].hash)
		if i <= j && (i < h && h <= j) || i > j && (i < h || h <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
	t.n--
}
