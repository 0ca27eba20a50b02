package embedded

import (
	"cmp"
	"context"
	"slices"

	"deeplink/internal/store"
)

// zset is a sorted set: its members by name, and the same in score order,
// made when a read needs it after changes. A change costs a map write; a
// read after changes sorts the set. Sets the service changes often
// (indexes) are read rarely, at a start.
type zset struct {
	score  map[string]int64
	sorted []store.Scored // by score, then member; nil once changed
}

func compareScored(a, b store.Scored) int {
	if c := cmp.Compare(a.Score, b.Score); c != 0 {
		return c
	}
	return cmp.Compare(a.Member, b.Member)
}

// add puts m at score s and reports whether that changed the set; the
// caller holds db.setsMu.
func (z *zset) add(m string, s int64) bool {
	if old, ok := z.score[m]; ok && old == s {
		return false
	}
	z.score[m] = s
	z.sorted = nil
	return true
}

func (z *zset) remove(m string) bool {
	if _, ok := z.score[m]; !ok {
		return false
	}
	delete(z.score, m)
	z.sorted = nil
	return true
}

// order returns the members in score order; the caller holds db.setsMu.
func (z *zset) order() []store.Scored {
	if z.sorted == nil {
		z.sorted = make([]store.Scored, 0, len(z.score))
		for m, sc := range z.score {
			z.sorted = append(z.sorted, store.Scored{Member: m, Score: sc})
		}
		slices.SortFunc(z.sorted, compareScored)
	}
	return z.sorted
}

// setLocked returns the set named name, made when make is set; db.setsMu
// is held.
func (db *DB) setLocked(name string, make bool) *zset {
	z := db.sets[name]
	if z == nil && make {
		z = &zset{score: map[string]int64{}}
		db.sets[name] = z
	}
	return z
}

func (db *DB) ZAdd(ctx context.Context, set, member string, score int64) error {
	t, err := db.setChange(set, member, true, score)
	if err != nil {
		return err
	}
	return db.commit(ctx, t)
}

func (db *DB) ZRem(ctx context.Context, set, member string) error {
	t, err := db.setChange(set, member, false, 0)
	if err != nil {
		return err
	}
	return db.commit(ctx, t)
}

// setChange adds member to set with score, or removes it, and returns the
// ticket of the change to wait on.
func (db *DB) setChange(set, member string, add bool, score int64) (ticket, error) {
	if err := db.writable(); err != nil {
		return ticket{}, err
	}
	db.setsMu.Lock()
	defer db.setsMu.Unlock()
	if add {
		if db.setLocked(set, true).add(member, score) {
			return db.logLocked(record{op: opZAdd, key: set, member: member, n: score}), nil
		}
		return db.unchanged(), nil
	}
	if z := db.setLocked(set, false); z != nil && z.remove(member) {
		if len(z.score) == 0 {
			delete(db.sets, set)
		}
		return db.logLocked(record{op: opZRem, key: set, member: member}), nil
	}
	return db.unchanged(), nil
}

func (db *DB) ZRange(ctx context.Context, set string, from, to int64, limit int, rev bool) ([]store.Scored, error) {
	if db.closed.Load() {
		return nil, store.ErrUnavailable
	}
	db.setsMu.Lock()
	defer db.setsMu.Unlock()
	z := db.setLocked(set, false)
	if z == nil || from > to {
		return nil, nil
	}
	sorted := z.order()
	lo, _ := slices.BinarySearchFunc(sorted, from, func(x store.Scored, s int64) int { return cmp.Compare(x.Score, s) })
	hi, _ := slices.BinarySearchFunc(sorted, to, func(x store.Scored, s int64) int {
		if x.Score <= s {
			return -1
		}
		return 1
	})
	in := sorted[lo:hi]
	n := len(in)
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]store.Scored, n)
	if rev {
		for i := range out {
			out[i] = in[len(in)-1-i]
		}
	} else {
		copy(out, in)
	}
	return out, nil
}

func (db *DB) ZClaim(ctx context.Context, set string, due, until int64, limit int) ([]store.Scored, error) {
	if err := db.writable(); err != nil {
		return nil, err
	}
	db.setsMu.Lock()
	z := db.setLocked(set, false)
	var got []store.Scored
	var t ticket
	if z != nil {
		for _, x := range z.order() {
			if x.Score > due || limit > 0 && len(got) == limit {
				break
			}
			got = append(got, x)
		}
		for _, x := range got {
			z.add(x.Member, until)
			t = db.logLocked(record{op: opZAdd, key: set, member: x.Member, n: until})
		}
	}
	db.setsMu.Unlock()
	if err := db.commit(ctx, t); err != nil {
		return nil, err
	}
	return got, nil
}
