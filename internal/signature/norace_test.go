//go:build !race

package signature

// Allocation counts are exact only without the race detector, which makes
// sync.Pool drop items at random; test.sh runs this file's tests without
// -race.

import (
	"strings"
	"testing"
	"time"
)

// Signing runs once per delivery attempt: it may allocate only the two
// header strings it returns.
func TestSignAllocations(t *testing.T) {
	s := mustSigner(t, NewSecret(), NewSecret())
	body := []byte(strings.Repeat("x", 512))
	at := time.Unix(1_700_000_000, 0)
	s.sign("evt_1", at, body) // warm the pool
	if n := testing.AllocsPerRun(200, func() { s.sign("evt_1", at, body) }); n > 2 {
		t.Errorf("sign allocates %.1f times per call, want ≤ 2", n)
	}
}
