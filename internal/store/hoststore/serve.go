package hoststore

import (
	"context"
	"errors"

	"deeplink/internal/store"
)

// Backend is what the host's store can tell of itself, beyond the
// contract. A nil func answers as a backend that cannot: never failing,
// and no cheap counts (Len and Count answer -1).
type Backend struct {
	Failing func() error
	Len     func() int
	Count   func(prefix string, keep func(val []byte) bool) int
}

// Serve answers one request frame of a Client with its reply frame,
// doing the operation on st (the host's store, or a view of it for one
// call). A malformed frame gets statusOther, and nothing is done. It is
// safe for concurrent use, as st is.
func (b *Backend) Serve(ctx context.Context, st store.Store, frame []byte) []byte {
	d := &dec{b: frame}
	out := &enc{b: make([]byte, 1, 64)} // the status byte, set below
	err := b.serve(ctx, st, d, out)
	if err == nil && d.done() != nil {
		err = errFrame
	}
	if err == nil {
		return out.b
	}
	out.b = out.b[:1]
	status := statusOther
	for s, e := range statusErr {
		if errors.Is(err, e) {
			status = s
			break
		}
	}
	// ErrNotFound and the like say all; ErrUnavailable and the rest carry
	// their text, for the module's log.
	if status == statusOther || status == statusUnavailable {
		out.str(err.Error())
	}
	out.b[0] = status
	return out.b
}

// serve decodes the request's arguments from d, runs it, and encodes its
// results to out after the status byte.
func (b *Backend) serve(ctx context.Context, st store.Store, d *dec, out *enc) error {
	switch op := d.byte(); op {
	case opGet:
		key := d.str()
		if d.bad {
			return errFrame
		}
		v, err := st.Get(ctx, key)
		out.bytes(nonNil(v))
		return err
	case opGetMany:
		// A key takes at least 1 byte of the frame: more are not there.
		n := d.int()
		if d.bad || n < 0 || n > int64(len(d.b)) {
			return errFrame
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = d.str()
		}
		if d.bad {
			return errFrame
		}
		vs, err := st.GetMany(ctx, keys)
		if err != nil {
			return err
		}
		out.int(int64(len(vs)))
		for _, v := range vs {
			out.bytes(v) // nil for none; an empty value is not nil
		}
		return nil
	case opPut, opInsert, opSwap:
		key, val, exp := d.str(), d.bytes(), d.time()
		if d.bad || val == nil {
			return errFrame
		}
		switch op {
		case opPut:
			return st.Put(ctx, key, val, exp)
		case opInsert:
			return st.Insert(ctx, key, val, exp)
		}
		v, err := st.Swap(ctx, key, val, exp)
		out.bytes(nonNil(v))
		return err
	case opExtend:
		key, exp := d.str(), d.time()
		if d.bad {
			return errFrame
		}
		return st.Extend(ctx, key, exp)
	case opTake:
		key := d.str()
		if d.bad {
			return errFrame
		}
		v, err := st.Take(ctx, key)
		out.bytes(nonNil(v))
		return err
	case opCAS:
		key, old, val, exp := d.str(), d.bytes(), d.bytes(), d.time()
		if d.bad {
			return errFrame
		}
		return st.CompareAndSwap(ctx, key, old, val, exp)
	case opDelete:
		key := d.str()
		if d.bad {
			return errFrame
		}
		return st.Delete(ctx, key)
	case opAdd:
		key, delta, exp := d.str(), d.int(), d.time()
		if d.bad {
			return errFrame
		}
		n, err := st.Add(ctx, key, delta, exp)
		out.int(n)
		return err
	case opZAdd:
		set, member, score := d.str(), d.str(), d.int()
		if d.bad {
			return errFrame
		}
		return st.ZAdd(ctx, set, member, score)
	case opZRem:
		set, member := d.str(), d.str()
		if d.bad {
			return errFrame
		}
		return st.ZRem(ctx, set, member)
	case opZRange, opZClaim:
		var (
			ms  []store.Scored
			err error
		)
		set, lo, hi, limit := d.str(), d.int(), d.int(), d.int()
		if op == opZRange {
			rev := d.byte() == 1
			if d.bad {
				return errFrame
			}
			ms, err = st.ZRange(ctx, set, lo, hi, int(limit), rev)
		} else {
			if d.bad {
				return errFrame
			}
			ms, err = st.ZClaim(ctx, set, lo, hi, int(limit))
		}
		out.int(int64(len(ms)))
		for _, m := range ms {
			out.str(m.Member)
			out.int(m.Score)
		}
		return err
	case opApply, opApplyIf:
		var old []byte // opApplyIf's: the first write's Old
		if op == opApplyIf {
			if old = d.bytes(); old == nil {
				return errFrame
			}
		}
		// A write takes at least 6 bytes of the frame: more are not there.
		n := d.int()
		if d.bad || n < 0 || n > int64(len(d.b))/6 || old != nil && n == 0 {
			return errFrame
		}
		ws := make([]store.Write, n)
		for i := range ws {
			ws[i] = store.Write{Key: d.str(), Val: d.bytes(), Exp: d.time(), Member: d.str(), Score: d.int(), Add: d.int()}
		}
		if d.bad {
			return errFrame
		}
		if old != nil {
			ws[0].Old = old
		}
		return st.Apply(ctx, ws)
	case opFailing:
		if b.Failing == nil {
			return nil
		}
		return b.Failing()
	case opLen:
		n := -1
		if b.Len != nil {
			n = b.Len()
		}
		out.int(int64(n))
		return nil
	case opCount:
		prefix, first := d.str(), d.byte()
		if d.bad {
			return errFrame
		}
		n := -1
		if b.Count != nil {
			n = b.Count(prefix, func(v []byte) bool { return len(v) > 0 && v[0] == first })
		}
		out.int(int64(n))
		return nil
	}
	return errFrame
}
