package webhook

import (
	"context"
	"errors"
	"strconv"
	"time"

	"deeplink/internal/store"
)

// A store's budgets in the state of record (records.go), kept as
// counters, so that replicas share them:
//
//   - pendingKey + store id counts what the store's pending deliveries
//     hold, NewCost each (the event's bytes and an overhead): reserved
//     before a publish's Apply, given back when a delivery ends or its
//     endpoint is deleted. A crash between a delivery's end and its give
//     back leaves its cost counted: at most one delivery's a crash.
//   - idemDayKey counts the Idempotency-Keys a store made each day (UTC);
//     a key lives 24 hours, so the keys made today and yesterday bound
//     those live, from above.
const (
	pendingKey = "hooks:pending:"
	idemDay    = "hooks:idemday:"
)

// reserve counts n new deliveries, whose events hold size bytes in all,
// against the store's pending budget, or fails with ErrOverBudget,
// counting nothing, when that would take it past budget.
func (r *records) reserve(ctx context.Context, storeID string, n, size int, budget int64) error {
	if n == 0 {
		return nil
	}
	cost := int64(size) + int64(n)*pendingOverhead
	v, err := r.st.Add(ctx, pendingKey+storeID, cost, time.Time{})
	if err != nil {
		return err
	}
	if v > budget {
		if _, err := r.st.Add(ctx, pendingKey+storeID, -cost, time.Time{}); err != nil {
			return err
		}
		return ErrOverBudget
	}
	return nil
}

// release gives back what n deliveries, whose events hold size bytes in
// all, held of the store's pending budget.
func (r *records) release(ctx context.Context, storeID string, n, size int) error {
	if n == 0 {
		return nil
	}
	_, err := r.st.Add(ctx, pendingKey+storeID, -int64(size)-int64(n)*pendingOverhead, time.Time{})
	return err
}

// pending is what the store's pending deliveries hold, as counted.
func (r *records) pending(ctx context.Context, storeID string) (int64, error) {
	return r.counter(ctx, pendingKey+storeID)
}

func (r *records) counter(ctx context.Context, key string) (int64, error) {
	b, err := r.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

func idemDayKey(storeID string, day int64) string {
	return idemDay + storeID + ":" + strconv.FormatInt(day, 10)
}

// idemRoom fails with ErrOverBudget when the store made budget
// Idempotency-Keys or more today and yesterday.
func (r *records) idemRoom(ctx context.Context, storeID string, now time.Time, budget int) error {
	day := now.Unix() / 86400
	var n int64
	for _, d := range []int64{day, day - 1} {
		v, err := r.counter(ctx, idemDayKey(storeID, d))
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

// idemMade counts a key the store made at now.
func (r *records) idemMade(ctx context.Context, storeID string, now time.Time) error {
	day := now.Unix() / 86400
	_, err := r.st.Add(ctx, idemDayKey(storeID, day), 1, time.Unix((day+2)*86400, 0))
	return err
}
