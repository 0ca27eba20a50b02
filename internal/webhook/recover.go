package webhook

import (
	"cmp"
	"slices"
	"time"
)

// retryLocked queues ev again for e now, as a new delivery asked for
// explicitly: it goes once even if e is disabled, or no longer takes ev's
// type (refusalLocked), and is retried on the schedule while e is
// enabled. The caller has checked the store's budget. hk.Mu must be held.
func (hk *Hooks) RetryLocked(e *Endpoint, ev *Event) *Delivery {
	d := hk.EnqueueLocked(e, ev)
	d.Explicit, d.WhileDisabled = true, !e.Enabled
	return d
}

// recoverLocked queues again, now, the events of e's failed deliveries
// created at or after since (recoverableLocked), over the whole log, and
// returns how many deliveries it made. It makes all of them or, past the
// store's budget of pending deliveries, none (ok false). It costs
// O(the log), as a listing does, and sends nothing itself: the caller
// persists what it queued before answering, and the dispatcher sends
// after. hk.Mu must be held.
func (hk *Hooks) RecoverLocked(e *Endpoint, since time.Time) (n int, ok bool) {
	evs := hk.recoverableLocked(e, since)
	var cost int64
	for _, ev := range evs {
		cost += NewCost(len(ev.Body))
	}
	if hk.Pending[e.StoreID]+cost > hk.Budget.Pending {
		return 0, false
	}
	for _, ev := range evs {
		hk.RetryLocked(e, ev)
	}
	return len(evs), true
}

// recoverableLocked returns the events recover sends again to e, oldest
// delivery first: the event of every delivery of e that has failed and
// whose event was created at or after since (its created_at, in whole
// seconds as it is shown), as the contract words it. An event with two
// failed deliveries goes twice; one sent again by a retry since still
// goes. hk.Mu must be held.
func (hk *Hooks) recoverableLocked(e *Endpoint, since time.Time) []*Event {
	var ds []*Delivery
	for _, d := range e.Log {
		if d.Status == StatusFailed && !time.Unix(d.Ev.CreatedAt, 0).Before(since) {
			ds = append(ds, d)
		}
	}
	slices.SortFunc(ds, func(a, b *Delivery) int { return cmp.Compare(a.Seq, b.Seq) })
	evs := make([]*Event, len(ds))
	for i, d := range ds {
		evs[i] = d.Ev
	}
	return evs
}
