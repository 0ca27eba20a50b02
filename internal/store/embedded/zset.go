package embedded

import (
	"cmp"
	"context"
	"slices"

	"deeplink/internal/store"
)

// zset is a sorted set: its members by name and, once a read has needed
// them in score order, the same in a skip list kept in step with the
// changes after. So a set read as it changes (a queue claimed at every
// attempt) costs O(log n) a change and a read, never a sort; and one
// mostly written (the indexes a start reads) drops its list once it has
// had more changes since its last read than it has members, and costs a
// map write a change again.
type zset struct {
	score  map[string]int64
	list   *skiplist // nil until a read needs the order
	writes int       // changes made to list since the last read
}

// changed counts a change to z's list, and drops the list when keeping it
// costs more than sorting again at the next read would.
func (z *zset) changed() {
	if z.writes++; z.writes > max(64, len(z.score)) {
		z.list, z.writes = nil, 0
	}
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
	old, ok := z.score[m]
	if ok && old == s {
		return false
	}
	z.score[m] = s
	if z.list != nil {
		if ok {
			z.list.remove(store.Scored{Member: m, Score: old})
		}
		z.list.insert(store.Scored{Member: m, Score: s})
		z.changed()
	}
	return true
}

func (z *zset) remove(m string) bool {
	old, ok := z.score[m]
	if !ok {
		return false
	}
	delete(z.score, m)
	if z.list != nil {
		z.list.remove(store.Scored{Member: m, Score: old})
		z.changed()
	}
	return true
}

// ordered returns the skip list of z, for a read, made if z has none;
// the caller holds db.setsMu.
func (z *zset) ordered() *skiplist {
	z.writes = 0
	if z.list == nil {
		all := make([]store.Scored, 0, len(z.score))
		for m, sc := range z.score {
			all = append(all, store.Scored{Member: m, Score: sc})
		}
		slices.SortFunc(all, compareScored)
		z.list = newSkiplist()
		for _, x := range all {
			z.list.insert(x)
		}
	}
	return z.list
}

// order returns the members in score order; the caller holds db.setsMu.
func (z *zset) order() []store.Scored {
	out := make([]store.Scored, 0, len(z.score))
	for n := z.ordered().first(); n != nil; n = n.next[0] {
		out = append(out, n.x)
	}
	return out
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
	list := z.ordered()
	var out []store.Scored
	if rev {
		for n := list.last(to); n != nil && n.x.Score >= from && (limit <= 0 || len(out) < limit); n = n.prev {
			out = append(out, n.x)
		}
	} else {
		for n := list.seek(from); n != nil && n.x.Score <= to && (limit <= 0 || len(out) < limit); n = n.next[0] {
			out = append(out, n.x)
		}
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
		for n := z.ordered().first(); n != nil && n.x.Score <= due && (limit <= 0 || len(got) < limit); n = n.next[0] {
			got = append(got, n.x)
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
