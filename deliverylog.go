package main

import (
	"crypto/sha256"
	"deeplink/internal/webhook"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

var errNoDelivery = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no delivery with that id for this endpoint"}

// deliveryOfLocked returns e's delivery named by the request path, or nil.
// hk.Mu must be held.
func deliveryOfLocked(hk *webhook.Hooks, e *webhook.Endpoint, r *http.Request) *webhook.Delivery {
	if d := hk.Deliv[r.PathValue("delivery_id")]; d != nil && d.EndpointID == e.ID {
		return d
	}
	return nil
}

func (s *server) handleGetDelivery(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	d := deliveryOfLocked(s.hooks, e, r)
	if d == nil {
		writeError(w, errNoDelivery)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": d.Detail(e)})
}

// handleListDeliveries lists e's log newest first, filtered by event_type
// and status, a page of limit (default 20, at most 100) at a time. The
// cursor is opaque: it encodes the sequence number to continue below.
func (s *server) handleListDeliveries(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	q := r.URL.Query()
	var fields []fieldError
	typ, status := q.Get("event_type"), q.Get("status")
	if typ != "" && !slices.Contains(knownEvents, typ) {
		fields = append(fields, fieldError{"event_type", "must be one of " + strings.Join(knownEvents, ", ")})
	}
	if status != "" && status != webhook.StatusPending && status != webhook.StatusSucceeded && status != webhook.StatusFailed {
		fields = append(fields, fieldError{"status", "must be pending, succeeded or failed"})
	}
	limit := 20
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			fields = append(fields, fieldError{"limit", "must be a whole number from 1 to 100"})
		}
		limit = n
	}
	before := uint64(1<<64 - 1)
	if c := q.Get("cursor"); c != "" {
		seq, ok := parseCursor(e, c)
		if !ok {
			fields = append(fields, fieldError{"cursor", "is not a cursor this endpoint returned"})
		}
		before = seq
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	page := []map[string]any{}
	next := ""
	var lastSeq uint64 // of the last delivery on the page
	for i := len(e.Log) - 1; i >= 0; i-- {
		d := e.Log[i]
		if d.Seq >= before || typ != "" && d.Ev.Type != typ || status != "" && d.Status != status {
			continue
		}
		if len(page) == limit {
			next = cursorFor(e, lastSeq)
			break
		}
		page = append(page, d.Summary())
		lastSeq = d.Seq
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "next_cursor": next})
}

// cursorFor is the next_cursor that continues e's log below seq: seq and
// a tag of e's id, so that every other endpoint refuses it.
func cursorFor(e *webhook.Endpoint, seq uint64) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)
	return base64.RawURLEncoding.EncodeToString(append(b, cursorTag(e)...))
}

// parseCursor returns the sequence number of a cursor cursorFor made for
// e, or false for anything else.
func parseCursor(e *webhook.Endpoint, c string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 12 || string(b[8:]) != string(cursorTag(e)) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// cursorTag is the part of e's cursors that names e.
func cursorTag(e *webhook.Endpoint) []byte {
	h := sha256.Sum256([]byte(e.ID))
	return h[:4]
}
