package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// enqueueLocked creates a pending delivery of ev to e, due now, and logs
// it. hk.mu must be held.
func (hk *hooks) enqueueLocked(e *endpoint, ev *event) *delivery {
	now := time.Now()
	d := &delivery{
		ID: newID("dlv_"), Seq: e.NextSeq, EndpointID: e.ID, EventID: ev.ID, Status: statusPending,
		CreatedAt: now.Unix(), NextAt: now.UnixNano(), ev: ev, index: -1,
	}
	e.NextSeq++
	hk.referLocked(d)
	hk.pending[e.StoreID] += logCost(d)
	e.log = append(e.log, d)
	hk.trimLogLocked(e)
	hk.scheduleLocked(d)
	hk.touchLocked(kindEndpoint, e.ID) // its NextSeq
	hk.touchLocked(kindDelivery, d.ID)
	// Written with each delivery made (a set: once a change), so that a
	// replica taking the delivery in finds its event (hookfeed.go).
	hk.touchLocked(kindEvent, ev.ID)
	return d
}

// trimLogLocked drops the oldest finished deliveries beyond the retention:
// past delivery_log_size, or past budget.log in bytes. Pending ones stay
// whatever their age; so the log is trimmed when one is added or grows,
// and again when ones logged beyond the retention end. It costs O(1) when
// nothing can go (e.finished is 0, as on a dead endpoint) and otherwise
// O(the entries up to the last one dropped): usually the oldest entry is
// finished and goes by reslicing, not by copying the whole log. A
// follower of a shared state leaves trimming to the leader, whose
// deletions it takes in (hookshare.go). hk.mu must be held.
func (hk *hooks) trimLogLocked(e *endpoint) {
	if !hk.leading {
		return
	}
	excess := min(len(e.log)-hk.cfg.Webhooks.DeliveryLogSize, e.finished)
	if over := e.logBytes - hk.budget.log; over > 0 {
		// The oldest finished ones that take it back under the budget.
		n := 0
		for _, d := range e.log {
			if over <= 0 || n == e.finished {
				break
			}
			if d.Status != statusPending {
				n++
				over -= logCost(d)
			}
		}
		excess = max(excess, n)
	}
	if excess <= 0 {
		return
	}
	// e.log[:j] holds the excess oldest finished ones and the pending ones
	// among them; the pending ones move up to just below e.log[j], in order.
	j := 0
	for n := 0; n < excess; j++ {
		if e.log[j].Status != statusPending {
			n++
		}
	}
	w := j
	for i := j - 1; i >= 0; i-- {
		d := e.log[i]
		if d.Status != statusPending {
			e.logBytes -= logCost(d)
			hk.forgetLocked(d)
			continue
		}
		w--
		e.log[w] = d
	}
	clear(e.log[:w])
	e.log = e.log[w:]
	e.finished -= excess
}

// finishedLocked marks the pending d, logged on e, as status. hk.mu must
// be held.
func (e *endpoint) finishedLocked(d *delivery, status string) {
	d.Status, d.NextAt = status, 0
	e.finished++
}

// endLocked ends d, of e, with status (statusSucceeded or statusFailed;
// a failure says why), and counts it: every way a delivery ends goes
// through here, so that /metrics agrees with the delivery logs. hk.mu
// must be held.
func (hk *hooks) endLocked(e *endpoint, d *delivery, status, reason string) {
	hk.touchLocked(kindDelivery, d.ID)
	hk.pending[e.StoreID] -= logCost(d)
	e.finishedLocked(d, status)
	e.logBytes += logCost(d)
	d.Reason = reason
	if status == statusSucceeded {
		hk.ended.succeeded.Add(1)
	} else {
		hk.ended.failed.Add(1)
	}
}

// referLocked adds d to the indexes, and its event if d is the first
// delivery to refer to it. hk.mu must be held.
func (hk *hooks) referLocked(d *delivery) {
	hk.deliv[d.ID] = d
	if d.ev.refs == 0 {
		hk.events[d.ev.ID] = d.ev
		hk.touchLocked(kindEvent, d.ev.ID)
	}
	d.ev.refs++
}

// forgetLocked removes d from the indexes, and its event once no delivery
// refers to it: O(1), by the event's reference count. hk.mu must be held.
func (hk *hooks) forgetLocked(d *delivery) {
	delete(hk.deliv, d.ID)
	hk.touchLocked(kindDelivery, d.ID)
	if d.ev.refs--; d.ev.refs == 0 {
		delete(hk.events, d.ev.ID)
		hk.touchLocked(kindEvent, d.ev.ID)
	}
}

// removeEndpointLocked deletes e, its log and its pending deliveries.
func (hk *hooks) removeEndpointLocked(e *endpoint) {
	for _, d := range e.log {
		if d.index >= 0 {
			hk.sched.remove(d)
		}
		if d.Status == statusPending {
			hk.pending[e.StoreID] -= logCost(d)
		}
		d.Status = statusFailed
		hk.forgetLocked(d)
	}
	hk.ready = slices.DeleteFunc(hk.ready, func(d *delivery) bool { return d.EndpointID == e.ID })
	e.waiting = nil
	if e.cancelAttempts != nil {
		e.cancelAttempts()
	}
	delete(hk.endpoints, e.ID)
	hk.byStore[e.StoreID] = slices.DeleteFunc(hk.byStore[e.StoreID], func(o *endpoint) bool { return o == e })
	hk.touchLocked(kindEndpoint, e.ID)
}

// summary is a delivery as the log lists it.
func (d *delivery) summary() map[string]any {
	m := map[string]any{
		"id": d.ID, "endpoint_id": d.EndpointID, "event_id": d.EventID, "event_type": d.ev.Type,
		"status": d.Status, "created_at": d.CreatedAt, "attempt_count": len(d.Attempts),
	}
	if d.Status == statusPending {
		m["next_attempt_at"] = time.Unix(0, d.NextAt).Unix()
	}
	if d.Reason != "" {
		m["failure_reason"] = d.Reason
	}
	if n := len(d.Attempts); n > 0 {
		a := d.Attempts[n-1]
		m["last_attempt_at"] = time.Unix(0, a.At).Unix()
		m["last_response_status"] = a.Status
	}
	return m
}

// detail is a delivery with every attempt as docs/api.md shows it.
func (d *delivery) detail(e *endpoint) map[string]any {
	m := d.summary()
	m["url"] = e.URL
	atts := []map[string]any{}
	for _, a := range d.Attempts {
		x := map[string]any{
			"at":              time.Unix(0, a.At).UTC().Format(time.RFC3339Nano),
			"url":             cmp.Or(a.URL, e.URL),
			"request_headers": flatHeader(deliveryHeader(a.signatures(d.ev.ID))),
			"request_body":    string(d.ev.Body),
			"response_status": a.Status,
			"response_body":   a.ResponseBody,
			"duration_ms":     a.DurationMS,
		}
		if a.Error != "" {
			x["error"] = a.Error
		}
		atts = append(atts, x)
	}
	m["attempts"] = atts
	m["request_body"] = string(d.ev.Body)
	return m
}

var errNoDelivery = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no delivery with that id for this endpoint"}

// deliveryOfLocked returns e's delivery named by the request path, or nil.
// hk.mu must be held.
func (hk *hooks) deliveryOfLocked(e *endpoint, r *http.Request) *delivery {
	if d := hk.deliv[r.PathValue("delivery_id")]; d != nil && d.EndpointID == e.ID {
		return d
	}
	return nil
}

func (s *server) handleGetDelivery(w http.ResponseWriter, r *http.Request, e *endpoint) {
	d := s.hooks.deliveryOfLocked(e, r)
	if d == nil {
		writeError(w, errNoDelivery)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": d.detail(e)})
}

// handleListDeliveries lists e's log newest first, filtered by event_type
// and status, a page of limit (default 20, at most 100) at a time. The
// cursor is opaque: it encodes the sequence number to continue below.
func (s *server) handleListDeliveries(w http.ResponseWriter, r *http.Request, e *endpoint) {
	q := r.URL.Query()
	var fields []fieldError
	typ, status := q.Get("event_type"), q.Get("status")
	if typ != "" && !slices.Contains(knownEvents, typ) {
		fields = append(fields, fieldError{"event_type", "must be one of " + strings.Join(knownEvents, ", ")})
	}
	if status != "" && status != statusPending && status != statusSucceeded && status != statusFailed {
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
	for i := len(e.log) - 1; i >= 0; i-- {
		d := e.log[i]
		if d.Seq >= before || typ != "" && d.ev.Type != typ || status != "" && d.Status != status {
			continue
		}
		if len(page) == limit {
			next = cursorFor(e, lastSeq)
			break
		}
		page = append(page, d.summary())
		lastSeq = d.Seq
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "next_cursor": next})
}

// cursorFor is the next_cursor that continues e's log below seq: seq and
// a tag of e's id, so that every other endpoint refuses it.
func cursorFor(e *endpoint, seq uint64) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)
	return base64.RawURLEncoding.EncodeToString(append(b, cursorTag(e)...))
}

// parseCursor returns the sequence number of a cursor cursorFor made for
// e, or false for anything else.
func parseCursor(e *endpoint, c string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 12 || string(b[8:]) != string(cursorTag(e)) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// cursorTag is the part of e's cursors that names e.
func cursorTag(e *endpoint) []byte {
	h := sha256.Sum256([]byte(e.ID))
	return h[:4]
}

// flatHeader is h with one value per name, as the delivery log shows it.
func flatHeader(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[k] = v[0]
	}
	return m
}
