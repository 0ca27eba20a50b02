package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Sending deliveries again: one failed delivery (retry), or every failed
// delivery of an endpoint since a time (recover). Both queue the event
// again as a new delivery, so that the receiver sees the same webhook-id
// and body as before.

func (s *server) handleRetryDelivery(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.hooks.Retry(r.Context(), st.ID, r.PathValue("endpoint_id"), r.PathValue("delivery_id"))
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": v})
}

// recoverRequest is the body of recover.
type recoverRequest struct {
	Since json.RawMessage `json:"since"`
}

// handleRecover is recover for the API: since from the body, 202 with
// how many deliveries it queued.
func (s *server) handleRecover(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.knownEndpoint(w, r, st) || !s.writable(w, r) {
		return
	}
	var req recoverRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	since, fields := parseSince(req.Since)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	n, err := s.hooks.Recover(r.Context(), st.ID, r.PathValue("endpoint_id"), since)
	if err != nil {
		s.writeHookError(w, err, true)
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
