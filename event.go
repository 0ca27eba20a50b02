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
	writeJSON(w, http.StatusAccepted, publishAnswer{Data: publishedID{ID: id}})
}

// publishAnswer is the body of a publish's 202: {"data":{"id":…}}.
type publishAnswer struct {
	Data publishedID `json:"data"`
}

type publishedID struct {
	ID string `json:"id"`
}

// validateEvent checks a publish body: a known, publishable type and, for
// order.status.updated, data.object with a string id and a known status.
// The object it returns is the bytes of req.Data that hold it, as sent.
func validateEvent(req *publishRequest) (typ string, object json.RawMessage, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if usable("type", req.Type, bad) {
		var ok bool
		if typ, ok = unquote(req.Type, webhook.EventOrderStatus); !ok {
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
	// data is held to decodeObject's rules without its reflection and
	// copies: scanObjectIn checks scanObject's, and the one rule more, no
	// invalid Unicode in a member's value, usable has just checked for all
	// of data. id and status are read in the same scan; were a name given
	// twice, its last value would count, as in a map, but scanObjectIn
	// refuses that.
	var id, status []byte // data.object's, raw; nil when absent
	if scanObjectIn(req.Data, "object", func(name, value []byte, _ bool) {
		if isName(name, "object") {
			object = value[:len(value):len(value)]
		}
	}, func(name, value []byte, _ bool) {
		switch {
		case isName(name, "id"):
			id = value
		case isName(name, "status"):
			status = value
		}
	}) != nil {
		bad("data", "must be an object")
		return typ, nil, fields
	}
	if len(object) == 0 || object[0] != '{' {
		bad("data.object", "must be an object")
		return typ, nil, fields
	}
	if typ == webhook.EventOrderStatus {
		// A JSON string decodes to "" only when it is "": every character
		// or escape in it decodes to at least one byte. Any other value
		// decodes to "" (null) or is not a string.
		if len(id) <= 2 || id[0] != '"' {
			bad("data.object.id", "must be a non-empty string")
		}
		if s, ok := unquote(status, orderStatuses...); !ok || !slices.Contains(orderStatuses, s) {
			bad("data.object.status", "must be one of "+strings.Join(orderStatuses, ", "))
		}
	}
	return typ, object, fields
}
