package main

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// Sending deliveries again: one failed delivery (retry), or every failed
// delivery of an endpoint since a time (recover, API.md §5). Both queue
// the event again as a new delivery through retryLocked, so that the
// receiver sees the same webhook-id and body as before.

// retryLocked queues ev again for e now, as a new delivery asked for
// explicitly: it goes once even if e is disabled, or no longer takes ev's
// type (refusalLocked), and is retried on the schedule while e is
// enabled. The caller has checked the store's budget. hk.mu must be held.
func (hk *hooks) retryLocked(e *endpoint, ev *event) *delivery {
	d := hk.enqueueLocked(e, ev)
	d.Explicit = true
	return d
}

func (s *server) handleRetryDelivery(w http.ResponseWriter, r *http.Request, e *endpoint) {
	hk := s.hooks
	old := hk.deliveryOfLocked(e, r)
	if old == nil {
		writeError(w, errNoDelivery)
		return
	}
	if !hk.roomLocked(e.StoreID, 1, len(old.ev.Body)) {
		writeError(w, errOverBudget)
		return
	}
	d := hk.retryLocked(e, old.ev)
	writeJSON(w, http.StatusAccepted, map[string]any{"data": d.summary()})
}

// recoverRequest is the body of recover.
type recoverRequest struct {
	Since json.RawMessage `json:"since"`
}

// handleRecover is recover (recoverLocked) for the API: since from the
// body, 202 with how many deliveries it queued.
func (s *server) handleRecover(w http.ResponseWriter, r *http.Request, e *endpoint) {
	var req recoverRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	since, fields := parseSince(req.Since)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	n, err := s.hooks.recoverLocked(e, since)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]int{"queued": n}})
}

// recoverLocked queues again, now, the events of e's failed deliveries
// created at or after since (recoverableLocked), over the whole log, and
// returns how many deliveries it made. It makes all of them or, past the
// store's budget of pending deliveries, none (errOverBudget). It costs
// O(the log), as a listing does, and sends nothing itself: the caller
// persists what it queued before answering, and the dispatcher sends
// after. hk.mu must be held.
func (hk *hooks) recoverLocked(e *endpoint, since time.Time) (int, *apiError) {
	evs := hk.recoverableLocked(e, since)
	var cost int64
	for _, ev := range evs {
		cost += newCost(len(ev.Body))
	}
	if hk.pending[e.StoreID]+cost > hk.budget.pending {
		return 0, errOverBudget
	}
	for _, ev := range evs {
		hk.retryLocked(e, ev)
	}
	return len(evs), nil
}

// parseSince reads recover's since: a string holding an RFC 3339 date
// and time, with its offset (Z or ±hh:mm) and fractions of a second if
// wanted.
func parseSince(raw json.RawMessage) (since time.Time, fields []fieldError) {
	const msg = "must be an RFC 3339 date and time with its offset, such as 2025-01-31T09:00:00Z"
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if !usable("since", raw, bad) {
		if absent(raw) {
			bad("since", "is required")
		}
		return since, fields
	}
	var str string
	if json.Unmarshal(raw, &str) != nil {
		bad("since", msg)
		return since, fields
	}
	since, err := time.Parse(time.RFC3339, str)
	if err != nil {
		bad("since", msg)
	}
	return since, fields
}

// recoverableLocked returns the events recover sends again to e, oldest
// first: each event created at or after since (its created_at, in whole
// seconds as it is shown) whose newest delivery on e has failed. A failed
// delivery whose event was queued again since (a retry, an earlier
// recover) is answered by that newer delivery: its event is on its way,
// delivered, or failed again and then sent once. hk.mu must be held.
func (hk *hooks) recoverableLocked(e *endpoint, since time.Time) []*event {
	newest := map[*event]*delivery{}
	for _, d := range e.log {
		if n := newest[d.ev]; n == nil || d.Seq > n.Seq {
			newest[d.ev] = d
		}
	}
	var ds []*delivery
	for ev, d := range newest {
		if d.Status == statusFailed && !time.Unix(ev.CreatedAt, 0).Before(since) {
			ds = append(ds, d)
		}
	}
	slices.SortFunc(ds, func(a, b *delivery) int { return cmp.Compare(a.Seq, b.Seq) })
	evs := make([]*event, len(ds))
	for i, d := range ds {
		evs[i] = d.ev
	}
	return evs
}
