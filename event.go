package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// publishRequest is the body of POST /events.
type publishRequest struct {
	Type json.RawMessage `json:"type"`
	Data json.RawMessage `json:"data"`
}

func (s *server) handlePublish(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	var req publishRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	typ, object, fields := validateEvent(&req)
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 255 { // a field of the request too: listed with the body's fields
		fields = append(fields, fieldError{"Idempotency-Key", "is longer than 255 characters"})
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	id, ok := s.hooks.publish(st.ID, typ, object, key)
	if !ok {
		writeError(w, errOverBudget)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": id}})
}

// publish makes an event of typ for the store and enqueues it for every
// enabled endpoint subscribed to typ. A key seen in the last 24 hours
// returns that event's id and sends nothing. It makes nothing, and
// reports false, when that would take the store past its budget.
func (hk *hooks) publish(storeID, typ string, object json.RawMessage, key string) (eventID string, ok bool) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	now := time.Now()
	k := storeID + "\x00" + key
	prev, seen := hk.idem[k]
	if key != "" {
		if seen && now.Unix() < prev.Expires {
			return prev.EventID, true
		}
		if !seen && hk.idemCount[storeID] >= hk.budget.idem {
			return "", false
		}
	}
	ev := hk.newEventLocked(typ, object)
	var to []*endpoint
	for _, e := range hk.byStore[storeID] {
		if e.Enabled && e.subscribed(typ) {
			to = append(to, e)
		}
	}
	if !hk.roomLocked(storeID, len(to), len(ev.Body)) {
		return "", false
	}
	for _, e := range to {
		hk.enqueueLocked(e, ev)
	}
	if key != "" {
		if !seen {
			hk.idemCount[storeID]++
		}
		exp := now.Add(idempotencyTTL).Unix()
		hk.idem[k] = idem{EventID: ev.ID, Expires: exp}
		// Every key lives idempotencyTTL, so the queue stays in order of
		// expiry but for the wall clock stepping back, which only keeps
		// the keys after a step a little longer than their TTL.
		hk.idemQueue = append(hk.idemQueue, idemEntry{k, exp})
		hk.touchLocked(kindIdem, k)
	}
	return ev.ID, true
}

// validateEvent checks a publish body: a known, publishable type and, for
// order.status.updated, data.object with a string id and a known status.
func validateEvent(req *publishRequest) (typ string, object json.RawMessage, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if usable("type", req.Type, bad) {
		if json.Unmarshal(req.Type, &typ) != nil {
			bad("type", "must be a string")
		} else if typ != eventOrderStatus {
			bad("type", "must be a known event type: "+eventOrderStatus+" ("+eventTest+" comes only from the test call)")
		}
	} else if absent(req.Type) {
		bad("type", "is required")
	}
	if absent(req.Data) {
		bad("data", "is required")
		return typ, nil, fields
	}
	// The object goes to merchants as it was sent: invalid UTF-8 in it
	// would be a body its receivers cannot parse as JSON, signed over
	// bytes that a verifier decoding it as text never sees.
	if !usable("data", req.Data, bad) {
		return typ, nil, fields
	}
	var data struct {
		Object json.RawMessage `json:"object"`
	}
	if decodeObject(req.Data, &data) != nil {
		bad("data", "must be an object")
		return typ, nil, fields
	}
	var obj map[string]json.RawMessage
	if len(data.Object) == 0 || data.Object[0] != '{' || json.Unmarshal(data.Object, &obj) != nil {
		bad("data.object", "must be an object")
		return typ, nil, fields
	}
	if typ == eventOrderStatus {
		var id, status string
		if json.Unmarshal(obj["id"], &id) != nil || id == "" {
			bad("data.object.id", "must be a non-empty string")
		}
		if json.Unmarshal(obj["status"], &status) != nil || !slices.Contains(orderStatuses, status) {
			bad("data.object.status", "must be one of "+strings.Join(orderStatuses, ", "))
		}
	}
	return typ, data.Object, fields
}

// newEventLocked makes an event with its envelope. The object goes in as
// it was published, compacted but not HTML-escaped: "<", ">" and "&"
// arrive as sent, not as \u003c and the like. hk.mu must be held.
func (hk *hooks) newEventLocked(typ string, object json.RawMessage) *event {
	ev := &event{ID: newID("evt_"), Type: typ, CreatedAt: hk.now().Unix()}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		CreatedAt int64  `json:"created_at"`
		Data      struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}{ID: ev.ID, Type: typ, CreatedAt: ev.CreatedAt, Data: struct {
		Object json.RawMessage `json:"object"`
	}{object}})
	ev.Body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return ev
}
