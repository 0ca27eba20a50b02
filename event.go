package main

import (
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// publishRequest is the body of POST /events.
type publishRequest struct {
	Type json.RawMessage `json:"type"`
	Data json.RawMessage `json:"data"`
}

func (s *server) handlePublish(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.writable(w, r) {
		return
	}
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
	id, err := s.hooks.Publish(r.Context(), st.ID, typ, object, key)
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": id}})
}

// validateEvent checks a publish body: a known, publishable type and, for
// order.status.updated, data.object with a string id and a known status.
func validateEvent(req *publishRequest) (typ string, object json.RawMessage, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if usable("type", req.Type, bad) {
		if json.Unmarshal(req.Type, &typ) != nil {
			bad("type", "must be a string")
		} else if typ != webhook.EventOrderStatus {
			bad("type", "must be a known event type: "+webhook.EventOrderStatus+" ("+webhook.EventTest+" comes only from the test call)")
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
	if typ == webhook.EventOrderStatus {
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
