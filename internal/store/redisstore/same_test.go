//go:build !wasip1

package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/store/redisstore/redistest"
	"deeplink/internal/store/storetest"
)

// TestSameAsEmbedded makes the same random changes and reads, time
// passing between them, on this store and on the embedded one, and wants
// the same answers from both: the edges the contract's suite does not
// reach (an expiry that has passed already, an empty old value, a
// counter's key holding text) mean the same on both.
func TestSameAsEmbedded(t *testing.T) {
	sv := redistest.New(t)
	c := storetest.NewClock()
	c.OnAdvance(func(d time.Duration) { sv.Advance(t, "same:", d) })
	r, err := Open(Options{URL: sv.URL(), Prefix: "same:", Now: c.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e, err := embedded.Open("", embedded.Options{Now: c.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	src := rand.NewPCG(1, 2)
	rnd := rand.New(src)
	pick := func(xs ...string) string { return xs[rnd.IntN(len(xs))] }
	val := func() []byte {
		if v := pick("nil", "", "a", "b", "7"); v != "nil" {
			return []byte(v)
		}
		return nil
	}
	// Whole seconds, and a minute at least ahead: Redis's real clock runs
	// on during the test by a few hundred milliseconds, not by a minute.
	exp := func() time.Time {
		switch rnd.IntN(5) {
		case 0:
			return time.Time{}
		case 1:
			return c.Now().Add(-time.Second)
		}
		return c.Now().Add(time.Duration(1+rnd.IntN(2)) * time.Minute)
	}
	ops := []struct {
		name string
		call func(s store.Store, k string) string
	}{
		{"Get", func(s store.Store, k string) string { return answer(s.Get(ctx, k)) }},
		{"Put", func(s store.Store, k string) string { return answer(nil, s.Put(ctx, k, val(), exp())) }},
		{"Insert", func(s store.Store, k string) string { return answer(nil, s.Insert(ctx, k, val(), exp())) }},
		{"Swap", func(s store.Store, k string) string { return answer(s.Swap(ctx, k, val(), exp())) }},
		{"Extend", func(s store.Store, k string) string { return answer(nil, s.Extend(ctx, k, exp())) }},
		{"Take", func(s store.Store, k string) string { return answer(s.Take(ctx, k)) }},
		{"CompareAndSwap", func(s store.Store, k string) string {
			return answer(nil, s.CompareAndSwap(ctx, k, val(), val(), exp()))
		}},
		{"Delete", func(s store.Store, k string) string { return answer(nil, s.Delete(ctx, k)) }},
		{"Add", func(s store.Store, k string) string {
			n, err := s.Add(ctx, k, int64(rnd.IntN(5)-2), exp())
			return answer(fmt.Append(nil, n), err)
		}},
		{"ZAdd", func(s store.Store, k string) string {
			return answer(nil, s.ZAdd(ctx, "z"+k, pick("m1", "m2", "m3"), int64(rnd.IntN(10))))
		}},
		{"ZRem", func(s store.Store, k string) string { return answer(nil, s.ZRem(ctx, "z"+k, pick("m1", "m2", "m3"))) }},
		{"ZRange", func(s store.Store, k string) string {
			got, err := s.ZRange(ctx, "z"+k, int64(rnd.IntN(10)), int64(rnd.IntN(10)), rnd.IntN(3), rnd.IntN(2) == 0)
			return answer(fmt.Append(nil, got), err)
		}},
		{"ZClaim", func(s store.Store, k string) string {
			got, err := s.ZClaim(ctx, "z"+k, int64(rnd.IntN(10)), int64(rnd.IntN(10)), rnd.IntN(3))
			return answer(fmt.Append(nil, got), err)
		}},
		{"Apply", func(s store.Store, k string) string {
			return answer(nil, s.Apply(ctx, []store.Write{{Key: k, Val: val(), Exp: exp()}, {Key: "z" + k, Member: "m1", Val: val(), Score: 5}}))
		}},
	}
	for i := range 20000 {
		if rnd.IntN(3) == 0 {
			c.Advance(time.Duration(rnd.IntN(4)) * 30 * time.Second)
		}
		op, k := rnd.IntN(len(ops)), pick("a", "b", "c")
		// Both calls must draw the same random arguments: replay the
		// generator's state for the second.
		state, _ := src.MarshalBinary()
		want := ops[op].call(e, k)
		src.UnmarshalBinary(state)
		if got := ops[op].call(r, k); got != want {
			t.Fatalf("step %d: %s(%q) = %s; want %s, as the embedded store answered", i, ops[op].name, k, got, want)
		}
	}
}

// answer is what a call returned, as text to compare: the value, or the
// contract's error, or that there was some other error.
func answer(v []byte, err error) string {
	for _, e := range []error{store.ErrNotFound, store.ErrExists, store.ErrConflict, store.ErrFull, store.ErrUnavailable} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "error"
	}
	return fmt.Sprintf("%q", v)
}
