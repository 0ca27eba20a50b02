package embedded

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"deeplink/internal/store"
)

// TestSkiplist checks a skip list against a sorted slice over random
// adds, moves and removes: its order both ways, and seek and last.
func TestSkiplist(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	z := &zset{score: map[string]int64{}}
	z.ordered()
	for step := range 5000 {
		m := fmt.Sprint("m", rng.IntN(300))
		if rng.IntN(3) == 0 {
			z.remove(m)
		} else {
			z.add(m, int64(rng.IntN(100)))
		}
		if step%97 != 0 {
			continue
		}
		var want []store.Scored
		for m, s := range z.score {
			want = append(want, store.Scored{Member: m, Score: s})
		}
		slices.SortFunc(want, compareScored)
		if got := z.order(); !slices.Equal(got, want) {
			t.Fatalf("step %d: order() = %v; want %v", step, got, want)
		}
		var back []store.Scored
		for n := z.list.last(1 << 62); n != nil; n = n.prev {
			back = append(back, n.x)
		}
		slices.Reverse(back)
		if !slices.Equal(back, want) {
			t.Fatalf("step %d: walking back = %v; want %v", step, back, want)
		}
		s := int64(rng.IntN(100))
		i := slices.IndexFunc(want, func(x store.Scored) bool { return x.Score >= s })
		if n := z.list.seek(s); (n == nil) != (i < 0) || n != nil && n.x != want[i] {
			t.Fatalf("step %d: seek(%d) = %v; want index %d of %v", step, s, n, i, want)
		}
		j := -1
		for k, x := range want {
			if x.Score <= s {
				j = k
			}
		}
		if n := z.list.last(s); (n == nil) != (j < 0) || n != nil && n.x != want[j] {
			t.Fatalf("step %d: last(%d) = %v; want index %d of %v", step, s, n, j, want)
		}
	}
}
