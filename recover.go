package main

import (
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Sending deliveries again: one failed delivery (retry), or every failed
// delivery of an endpoint since a time (recover, API.md §5). Both queue
// the event again as a new delivery through retryLocked, so that the
// receiver sees the same webhook-id and body as before.

func (s *server) handleRetryDelivery(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	hk := s.hooks
	old := deliveryOfLocked(hk, e, r)
	if old == nil {
		writeError(w, errNoDelivery)
		return
	}
	if !hk.RoomLocked(e.StoreID, 1, len(old.Ev.Body)) {
		writeError(w, errOverBudget)
		return
	}
	d := hk.RetryLocked(e, old.Ev)
	writeJSON(w, http.StatusAccepted, map[string]any{"data": d.Summary()})
}

// recoverRequest is the body of recover.
type recoverRequest struct {
	Since json.RawMessage `json:"since"`
}

// handleRecover is recover (recoverLocked) for the API: since from the
// body, 202 with how many deliveries it queued.
func (s *server) handleRecover(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	var req recoverRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	since, fields := parseSince(req.Since)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	n, ok := s.hooks.RecoverLocked(e, since)
	if !ok {
		writeError(w, errOverBudget)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]int{"queued": n}})
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
	// RFC 3339 lets the T and the Z be lower case; Go's layout does not.
	since, err := time.Parse(time.RFC3339, strings.ToUpper(str))
	if err != nil {
		bad("since", msg)
	}
	// An event's created_at is in whole seconds: one created within the
	// second since falls in is "at or after" it.
	return since.Truncate(time.Second), fields
}
