package webhook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"deeplink/internal/store"
)

// A store's budgets in the state of record (records.go), kept as
// counters, so that replicas share them:
//
//   - pendingKey + store id counts what the store's pending deliveries
//     hold, NewCost each (the event's bytes and an overhead): added by
//     a publish's Apply (records.make), reserved before the Apply of the
//     other changes that make deliveries (reserve), given back when a
//     delivery ends or its endpoint is deleted. A crash between a
//     delivery's end and its give back leaves its cost counted: at most
//     one delivery's a crash. A publish checks the budget against the
//     count it read before its Apply, so that publishes of one store
//     under way at once may each pass the check and together go past
//     the budget: by at most what they make, one event's deliveries each
//     (5 × NewCost(64 KiB) at most), and only while they run; the store's
//     requests are bounded by its keys' budget (fairness.key_burst).
//   - idemDayKey counts the Idempotency-Keys a store made each day (UTC);
//     a key lives 24 hours, so the keys made today and yesterday bound
//     those live, from above (but for publishes under way at once, which
//     all pass the check made before their keys are counted: by at most
//     one key each).
const (
	pendingKey = "hooks:pending:"
	idemDay    = "hooks:idemday:"
)

// budgets are a store's limits: what its pending deliveries may hold
// (NewCost each), how many Idempotency-Keys it may have made in a day and
// the day before, and what an endpoint's finished deliveries may hold in
// its log (logCost each).
type budgets struct {
	Pending int64
	Idem    int
	Log     int64
}

// pendingCost is what n deliveries, whose events hold size bytes in all,
// hold of their store's pending budget: NewCost each.
func pendingCost(n, size int) int64 { return int64(size) + int64(n)*pendingOverhead }

// reserve counts pendingCost(n, size) against the store's pending budget,
// or, when that would take it past budget, counts nothing: ErrOverBudget.
func (r *records) reserve(ctx context.Context, storeID string, n, size int, budget int64) error {
	v, err := r.st.Add(ctx, pendingKey+storeID, pendingCost(n, size), time.Time{})
	if err != nil || v <= budget {
		return err
	}
	if err := r.release(ctx, storeID, n, size); err != nil {
		return err
	}
	return ErrOverBudget
}

// release gives back pendingCost(n, size) of the store's pending budget.
func (r *records) release(ctx context.Context, storeID string, n, size int) error {
	if n == 0 {
		return nil
	}
	return r.st.Apply(ctx, []store.Write{releaseWrite(storeID, n, size)})
}

// releaseWrite is release's write, for an Apply of more.
func releaseWrite(storeID string, n, size int) store.Write {
	return store.Write{Key: pendingKey + storeID, Add: -pendingCost(n, size)}
}

// counter is the number the counter key holds (none: 0).
func (r *records) counter(ctx context.Context, key string) (int64, error) {
	b, err := r.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return counted(key, b)
}

// counted is the number the counter key holds, read as b (nil: none, 0).
func counted(key string, b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("webhooks: counter %s: %w", key, err)
	}
	return n, nil
}

func idemDayKey(storeID string, day int64) string {
	return idemDay + storeID + ":" + strconv.FormatInt(day, 10)
}

// idemRoom fails with ErrOverBudget when the store made budget
// Idempotency-Keys or more on day and the day before, whose counters
// read as made.
func idemRoom(storeID string, day int64, made [][]byte, budget int) error {
	var n int64
	for i, b := range made {
		v, err := counted(idemDayKey(storeID, day-int64(i)), b)
		if err != nil {
			return err
		}
		n += v
	}
	if n >= int64(budget) {
		return ErrOverBudget
	}
	return nil
}
