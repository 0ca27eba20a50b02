package storetest

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"deeplink/internal/store"
)

// applyTests are the contract's tests of Apply: writes of every kind in
// one call, counters, and the condition on the first write.
var applyTests = []test{
	{"Apply", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.Put(ctx, "gone", []byte("v"), time.Time{}))
		must(t, s.ZAdd(ctx, "z", "old", 1))
		must(t, s.Apply(ctx, []store.Write{
			{Key: "a", Val: []byte("1"), Exp: c.Now().Add(time.Minute)},
			{Key: "a", Val: []byte("2"), Exp: c.Now().Add(time.Minute)}, // in order: the last wins
			{Key: "gone"},
			{Key: "z", Member: "new", Val: []byte{}, Score: 5},
			{Key: "z", Member: "old"},
		}))
		wantValue(t, s, "a", "2")
		wantGone(t, s, "gone")
		got, err := s.ZRange(ctx, "z", 0, 10, 0, false)
		if err != nil || scoredString(got) != "new5" {
			t.Errorf("ZRange after Apply = %q, %v; want \"new5\"", scoredString(got), err)
		}
		c.Advance(time.Minute)
		wantGone(t, s, "a")
		must(t, s.Apply(ctx, nil))
	}},
	{"ApplyAdd", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		must(t, s.Put(ctx, "live", []byte("10"), c.Now().Add(time.Hour)))
		must(t, s.Apply(ctx, []store.Write{
			{Key: "forever", Add: 3},
			{Key: "forever", Add: -1},
			{Key: "expiring", Add: 5, Exp: c.Now().Add(time.Minute)},
			{Key: "live", Add: 2, Exp: c.Now().Add(time.Second)}, // keeps its hour
			{Key: "past", Add: 1, Exp: c.Now().Add(-time.Second)},
		}))
		wantValue(t, s, "forever", "2")
		wantValue(t, s, "expiring", "5")
		wantValue(t, s, "live", "12")
		wantGone(t, s, "past")
		if n, err := s.Add(ctx, "forever", 1, time.Time{}); err != nil || n != 3 {
			t.Fatalf("Add(forever, 1) after Apply = %d, %v; want 3", n, err)
		}
		c.Advance(time.Minute)
		wantGone(t, s, "expiring")
		wantValue(t, s, "live", "12")
		c.Advance(time.Hour)
		wantGone(t, s, "live")
	}},
	{"ApplyAddRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		race(50, func(i int) error {
			return s.Apply(ctx, []store.Write{{Key: "n", Add: 2}, {Key: "k" + strconv.Itoa(i), Val: []byte("v")}})
		})
		wantValue(t, s, "n", "100")
	}},
	{"ApplyIf", func(t *testing.T, b Backend) {
		s, c := open(t, b)
		// Each case starts from "rec" holding "v1" and the counter "n" at 1.
		writes := func(first store.Write) []store.Write {
			return []store.Write{first,
				{Key: "z", Member: "m", Val: []byte{1}, Score: 7},
				{Key: "n", Add: 2},
				{Key: "other", Val: []byte("o"), Exp: c.Now().Add(time.Minute)},
			}
		}
		for _, tc := range []struct {
			name    string
			first   store.Write
			want    error
			wantRec string // "<nil>" for none
		}{
			{"it holds Old", store.Write{Key: "rec", Val: []byte("v2"), Old: []byte("v1")}, nil, "v2"},
			{"a delete", store.Write{Key: "rec", Old: []byte("v1")}, nil, "<nil>"},
			{"another value", store.Write{Key: "rec", Val: []byte("v2"), Old: []byte("v0")}, store.ErrConflict, "v1"},
			{"an empty Old", store.Write{Key: "rec", Val: []byte("v2"), Old: []byte{}}, store.ErrConflict, "v1"},
			{"no entry", store.Write{Key: "none", Val: []byte("v2"), Old: []byte("v1")}, store.ErrConflict, "v1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				must(t, s.Apply(ctx, []store.Write{{Key: "rec", Val: []byte("v1")}, {Key: "z", Member: "m"}, {Key: "n", Val: []byte("1")}, {Key: "other"}}))
				if err := s.Apply(ctx, writes(tc.first)); !errors.Is(err, tc.want) {
					t.Fatalf("Apply(first %+v) = %v; want %v", tc.first, err, tc.want)
				}
				got, err := s.GetMany(ctx, []string{"rec", "n", "other"})
				if err != nil {
					t.Fatal(err)
				}
				members, err := s.ZRange(ctx, "z", 0, 10, 0, false)
				if err != nil {
					t.Fatal(err)
				}
				rec := string(got[0])
				if got[0] == nil {
					rec = "<nil>"
				}
				wantN, wantOther, wantZ := "3", "o", "m7"
				if tc.want != nil {
					wantN, wantOther, wantZ = "1", "", ""
				}
				if rec != tc.wantRec || string(got[1]) != wantN || string(got[2]) != wantOther || scoredString(members) != wantZ {
					t.Errorf("after Apply(first %+v): rec %q, n %q, other %q, z %q; want %q, %q, %q, %q",
						tc.first, rec, got[1], got[2], scoredString(members), tc.wantRec, wantN, wantOther, wantZ)
				}
			})
		}
		for _, ws := range [][]store.Write{
			{{Key: "a", Val: []byte("1")}, {Key: "rec", Val: []byte("v2"), Old: []byte("v1")}},
			{{Key: "z", Member: "m", Val: []byte{1}, Old: []byte("v1")}},
			{{Key: "n", Add: 1, Old: []byte("1")}},
		} {
			if err := s.Apply(ctx, ws); !errors.Is(err, store.ErrOldNotFirst) {
				t.Errorf("Apply(%+v) = %v; want ErrOldNotFirst", ws, err)
			}
		}
	}},
	{"ApplyIfRace", func(t *testing.T, b Backend) {
		s, _ := open(t, b)
		must(t, s.Put(ctx, "rec", []byte("v0"), time.Time{}))
		won := race(20, func(i int) error {
			return s.Apply(ctx, []store.Write{{Key: "rec", Val: []byte("v" + strconv.Itoa(i+1)), Old: []byte("v0")}, {Key: "n", Add: 1}})
		})
		if won != 1 {
			t.Errorf("%d of 20 Applies on one Old won; want 1", won)
		}
		wantValue(t, s, "n", "1")
	}},
}
