package webhook

import (
	"cmp"
	"strconv"
	"time"

	"deeplink/internal/signature"
)

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Why a delivery failed, as its log shows it (failure_reason).
const (
	ReasonRetriesUsedUp = "no attempt succeeded and the retries are used up"
	ReasonDisabled      = "the endpoint is disabled"
	ReasonUnsubscribed  = "the endpoint no longer takes this event type"
)

// Delivery is one event sent to one endpoint, with every attempt.
type Delivery struct {
	ID         string    `json:"id"`
	Seq        uint64    `json:"seq"`
	EndpointID string    `json:"endpoint_id"`
	EventID    string    `json:"event_id"`
	Status     string    `json:"status"`
	CreatedAt  int64     `json:"created_at"`
	NextAt     int64     `json:"next_at,omitempty"` // unix nanoseconds of the next attempt, while pending
	Attempts   []Attempt `json:"attempts"`
	Explicit   bool      `json:"explicit,omitempty"` // made by the test call or a manual retry
	// Made explicitly while the endpoint was disabled: it goes once all
	// the same (refusal).
	WhileDisabled bool   `json:"while_disabled,omitempty"`
	Reason        string `json:"reason,omitempty"` // why it failed
	// StoreID is the store of the delivery's endpoint: what its budget
	// is given back to should the endpoint be gone when it ends.
	StoreID string `json:"store_id,omitempty"`
	// LoggedAt is the delivery's score in its endpoint's log (unix
	// microseconds of when it was made): its place among the finished
	// ones, for trimming.
	LoggedAt int64 `json:"logged_at,omitempty"`
	// The event the delivery sends. Earlier builds kept events in
	// records of their own, and left it out: upgradeRecords puts it in.
	Event *Event `json:"event,omitempty"`

	// written is the length of d's record as this process last wrote
	// it, ended: what d holds in its endpoint's log (logCost). Not in
	// the record.
	written int
}

// refusal is why e refuses d, or "": only enabled endpoints subscribed to
// the type of d's event receive it. A delivery asked for explicitly, by
// the test call, a retry or recover, goes once whatever e's events, and
// even if e is disabled; its retries then need e enabled.
func (e *Endpoint) refusal(d *Delivery) string {
	switch {
	case d.Explicit && (e.Enabled || d.WhileDisabled && len(d.Attempts) == 0):
		return ""
	case !e.Enabled:
		return ReasonDisabled
	case !d.Explicit && !e.subscribed(d.Event.Type):
		return ReasonUnsubscribed
	}
	return ""
}

// summary is a delivery as the log lists it.
func (d *Delivery) summary() map[string]any {
	m := map[string]any{
		"id": d.ID, "endpoint_id": d.EndpointID, "event_id": d.EventID, "event_type": d.Event.Type,
		"status": d.Status, "created_at": d.CreatedAt, "attempt_count": len(d.Attempts),
	}
	if d.Status == StatusPending {
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
func (d *Delivery) detail(e *Endpoint) map[string]any {
	m := d.summary()
	m["url"] = e.URL
	atts := []map[string]any{}
	for _, a := range d.Attempts {
		// The headers it sent, rebuilt from the signatures it keeps, one
		// value per name.
		h := map[string]string{}
		sig := signature.Headers{Signature: a.Signature, ID: d.Event.ID, Timestamp: strconv.FormatInt(a.Timestamp, 10), StdSignature: a.StdSignature}
		for k, v := range DeliveryHeader(sig) {
			h[k] = v[0]
		}
		x := map[string]any{
			"at":              time.Unix(0, a.At).UTC().Format(time.RFC3339Nano),
			"url":             cmp.Or(a.URL, e.URL),
			"request_headers": h,
			"request_body":    string(d.Event.Body),
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
	m["request_body"] = string(d.Event.Body)
	return m
}
