package main

import (
	"deeplink/internal/webhook"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

func (s *server) handleGetDelivery(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.hooks.Delivery(r.Context(), st.ID, r.PathValue("endpoint_id"), r.PathValue("delivery_id"))
	if err != nil {
		s.writeHookError(w, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// handleListDeliveries lists an endpoint's log newest first, filtered by
// event_type and status, a page of limit (default 20, at most 100) at a
// time. The cursor is opaque: the engine makes and reads it.
func (s *server) handleListDeliveries(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.knownEndpoint(w, r, st) {
		return
	}
	q := r.URL.Query()
	var fields []fieldError
	dq := webhook.DeliveryQuery{EventType: q.Get("event_type"), Status: q.Get("status"), Limit: 20, Cursor: q.Get("cursor")}
	if dq.EventType != "" && !slices.Contains(knownEvents, dq.EventType) {
		fields = append(fields, fieldError{"event_type", "must be one of " + strings.Join(knownEvents, ", ")})
	}
	if dq.Status != "" && dq.Status != webhook.StatusPending && dq.Status != webhook.StatusSucceeded && dq.Status != webhook.StatusFailed {
		fields = append(fields, fieldError{"status", "must be pending, succeeded or failed"})
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			fields = append(fields, fieldError{"limit", "must be a whole number from 1 to 100"})
		}
		dq.Limit = n
	}
	if dq.Cursor != "" && !webhook.ValidCursor(r.PathValue("endpoint_id"), dq.Cursor) {
		fields = append(fields, fieldError{"cursor", webhook.ErrBadCursor.Error()})
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	page, next, err := s.hooks.Deliveries(r.Context(), st.ID, r.PathValue("endpoint_id"), dq)
	if err != nil {
		s.writeHookError(w, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "next_cursor": next})
}
