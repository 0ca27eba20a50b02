package main

// expiries is a shard's index of its entries by the second they expire in,
// so that a sweep visits what expires rather than the whole table: a timing
// wheel of wheelSeconds buckets of entry hashes, one per second, and a list
// of the entries expiring further ahead, moved into the wheel as their time
// comes near (every wheelSeconds/2, which is often enough for none to be
// missed). Stale hashes, of entries deleted or replaced since, cost a
// table probe when their second comes and are dropped then. The owning
// shard's mutex guards it.
type expiries struct {
	wheel [][]uint64   // wheel[sec%wheelSeconds]: hashes of entries expiring in second sec
	next  int64        // the first second the wheel holds that the sweep has not finished
	far   [][]farEntry // entries expiring at or past next+wheelSeconds, in blocks of farBlock: appending never copies
	farAt int64        // the second far is next moved into the wheel
}

type farEntry struct {
	hash uint64
	exp  int64 // Unix ns
}

// farBlock is the size of a block of far entries.
const farBlock = 1024

// wheelSeconds is the wheel's span: longer than an auth code lives (5
// minutes by default), so only sessions and the like go to far.
const wheelSeconds = 1024

func newExpiries(now int64) expiries {
	sec := now / 1e9
	return expiries{wheel: make([][]uint64, wheelSeconds), next: sec, farAt: sec + wheelSeconds/2}
}

// add indexes an entry of hash h expiring at exp (Unix ns).
func (x *expiries) add(h uint64, exp int64) {
	sec := max(exp/1e9, x.next) // an entry already expired goes to the next second swept
	if sec >= x.next+wheelSeconds {
		if n := len(x.far); n == 0 || len(x.far[n-1]) == farBlock {
			x.far = append(x.far, make([]farEntry, 0, farBlock))
		}
		last := &x.far[len(x.far)-1]
		*last = append(*last, farEntry{h, exp})
		return
	}
	b := &x.wheel[sec%wheelSeconds]
	*b = append(*b, h)
}

// due calls visit for each hash indexed in the seconds up to now's (Unix
// ns), in order; visit reports whether the hash must stay indexed for that
// second (its entry expires later in now's second). The others, expired or
// stale, are dropped.
func (x *expiries) due(now int64, visit func(h uint64, sec int64) (keep bool)) {
	sec := now / 1e9
	x.visitSeconds(x.next, sec, visit)
	x.next = max(x.next, sec)
	if sec >= x.farAt {
		x.moveNear(sec)
		x.visitSeconds(sec, sec, visit) // far entries already expired went to sec
	}
}

// visitSeconds runs visit over the buckets of the seconds from to to, as due.
func (x *expiries) visitSeconds(from, to int64, visit func(h uint64, sec int64) (keep bool)) {
	for s := from; s <= to && s < from+wheelSeconds; s++ {
		b := &x.wheel[s%wheelSeconds]
		kept := (*b)[:0]
		for _, h := range *b {
			if visit(h, s) {
				kept = append(kept, h)
			}
		}
		*b = kept
	}
}

// moveNear moves into the wheel the far entries that now fall within it.
func (x *expiries) moveNear(sec int64) {
	blocks := x.far
	x.far = nil
	for _, b := range blocks {
		for _, e := range b {
			x.add(e.hash, e.exp) // into the wheel, or into far again
		}
	}
	x.farAt = sec + wheelSeconds/2
}
