package main

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap drives a table with hashes chosen to collide (few
// home slots, at both ends, so clusters wrap past the end into entries at
// home at the start) through random puts,
// removals and sweeps, checking it against a map after every step: each
// entry is found where a probe from its home reaches it, nothing removed is
// found, and the count is right.
func TestTableAgainstMap(t *testing.T) {
	for _, homes := range []int{1, 3, 16, 1 << 20} {
		rng := rand.New(rand.NewPCG(uint64(homes), 7))
		var keys []Key   // a slot's ref.off indexes keys
		var exps []int64 // and their expiries, as the store's chunks hold both
		keyAt := func(r valRef) *Key { return &keys[r.off] }
		tab := newTable()
		model := map[Key]int64{} // key -> exp
		hashes := map[Key]uint64{}
		// hash gives a key a hash whose top bits pick one of a few homes,
		// among them the last slots of the table, so clusters wrap.
		hash := func(k Key) uint64 {
			if h, ok := hashes[k]; ok {
				return h
			}
			h := rng.Uint64()
			if homes < 1<<20 {
				// The top 11 bits: near the end or the start of the table,
				// at every size up to 2048 slots.
				home := rng.IntN(homes)
				if rng.IntN(2) == 0 {
					home = 2047 - home
				}
				h = uint64(home)<<53 | h>>11
			}
			h |= 1
			hashes[k] = h
			return h
		}
		check := func(step int) {
			t.Helper()
			if tab.n != len(model) {
				t.Fatalf("homes %d, step %d: n = %d; want %d", homes, step, tab.n, len(model))
			}
			for k, exp := range model {
				if len(tab.slots) == 0 {
					t.Fatalf("homes %d, step %d: empty table holds %x", homes, step, k[:4])
				}
				i, ok := tab.find(k, hash(k), keyAt)
				if !ok || exps[tab.slots[i].ref.off] != exp {
					t.Fatalf("homes %d, step %d: find(%x) = %d, %v; want exp %d", homes, step, k[:4], i, ok, exp)
				}
			}
		}
		for step := range 3000 {
			k := Key{byte(rng.IntN(100)), byte(rng.IntN(2))}
			_, had := model[k]
			switch op := rng.IntN(10); {
			case op < 6: // put or replace
				tab.ensure()
				i, ok := tab.find(k, hash(k), keyAt)
				if ok != had {
					t.Fatalf("homes %d, step %d: find(%x) found %v; want %v", homes, step, k[:4], ok, had)
				}
				exp := int64(step)
				keys, exps = append(keys, k), append(exps, exp) // never changed in place
				ref := valRef{off: uint32(len(keys) - 1)}
				if ok {
					tab.slots[i].ref = ref
				} else {
					tab.put(i, slot{hash: hash(k), ref: ref})
				}
				model[k] = exp
			case op < 9: // remove
				if len(tab.slots) == 0 {
					continue
				}
				i, ok := tab.find(k, hash(k), keyAt)
				if ok != had {
					t.Fatalf("homes %d, step %d: find(%x) found %v; want %v", homes, step, k[:4], ok, had)
				}
				if ok {
					tab.remove(i)
					delete(model, k)
				}
			default: // a sweep: remove, as memStore.Sweep does, what is older than a cut
				cut := int64(step - rng.IntN(300))
				for j := 0; j < len(tab.slots); {
					if s := &tab.slots[j]; s.hash != 0 && exps[s.ref.off] < cut {
						tab.remove(j)
						continue
					}
					j++
				}
				for k, exp := range model {
					if exp < cut {
						delete(model, k)
					}
				}
			}
			check(step)
			if 2*tab.n > len(tab.slots) {
				t.Fatalf("homes %d, step %d: %d of %d slots used", homes, step, tab.n, len(tab.slots))
			}
		}
	}
}

// A table asks to double early only within an eighth of its doubling,
// takes only slots of the size it needs, and moves into them with every
// entry still found.
func TestTableGrowsEarly(t *testing.T) {
	var keys []Key
	keyAt := func(r valRef) *Key { return &keys[r.off] }
	tab := newTable()
	add := func() {
		k := Key{byte(len(keys)), byte(len(keys) >> 8)}
		keys = append(keys, k)
		tab.ensure()
		h := tab.hashOf(k)
		i, ok := tab.find(k, h, keyAt)
		if ok {
			t.Fatalf("key %d found before it was put", len(keys)-1)
		}
		tab.put(i, slot{hash: h, ref: valRef{off: uint32(len(keys) - 1)}})
	}
	add()
	size := len(tab.slots)
	for {
		if got, _ := tab.growth(0); got != 0 {
			break
		}
		if len(tab.slots) != size {
			t.Fatalf("the table doubled at %d entries without asking to first", tab.n)
		}
		add()
	}
	got, more := tab.growth(0)
	if got != 2*size || more != size/2-tab.n {
		t.Fatalf("growth(0) = %d, %d; want %d, %d", got, more, 2*size, size/2-tab.n)
	}
	if 8*more > size/2 || 8*(more+1) <= size/2 {
		t.Fatalf("growth asked with %d entries to go of %d: not at an eighth", more, size/2)
	}
	tab.growInto(newSlots(4*size, nil)) // not the size the doubling needs
	if len(tab.slots) != size {
		t.Fatalf("growInto took %d slots for a doubling to %d", 4*size, 2*size)
	}
	slots := newSlots(2*size, nil)
	tab.growInto(slots)
	if len(tab.slots) != 2*size || &tab.slots[0] != &slots[0] {
		t.Fatalf("growInto did not move the table into the slots given")
	}
	if got, _ := tab.growth(0); got != 0 {
		t.Errorf("growth(0) just after doubling = %d; want 0", got)
	}
	for i, k := range keys {
		if _, ok := tab.find(k, tab.hashOf(k), keyAt); !ok {
			t.Errorf("key %d lost in the doubling", i)
		}
	}
}

func TestTableGrowthSoon(t *testing.T) {
	tab := newTable()
	tab.resize(1024) // holds 512; asks at an eighth, 64 to go
	tab.n = 312      // 200 to go
	for _, tc := range []struct {
		soon     int
		wantSize int
	}{
		{0, 0}, {199, 0}, {200, 2048}, {1000, 2048},
	} {
		if size, more := tab.growth(tc.soon); size != tc.wantSize || size != 0 && more != 200 {
			t.Errorf("growth(%d) with 200 to go = %d, %d; want %d, 200", tc.soon, size, more, tc.wantSize)
		}
	}
}

func TestTableShrinkSize(t *testing.T) {
	for _, tc := range []struct{ slots, n, want int }{
		{0, 0, 0},
		{minSlots, 0, 0}, // never below minSlots
		{2 * minSlots, 8, minSlots},
		{2 * minSlots, 9, 0},   // over a sixteenth
		{1 << 16, 0, minSlots}, // a burst gone entirely
		{1 << 16, 1000, 4096},  // a quarter full at most: 4000 needs 4096
		{1 << 16, 4096, 1 << 14},
		{1 << 16, 4097, 0},
	} {
		tab := newTable()
		if tc.slots > 0 {
			tab.resize(tc.slots)
		}
		tab.n = tc.n
		if got := tab.shrinkSize(); got != tc.want {
			t.Errorf("shrinkSize() of %d slots holding %d = %d; want %d", tc.slots, tc.n, got, tc.want)
		}
	}
}
