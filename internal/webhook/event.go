package webhook

import (
	"encoding/json"
	"time"
)

// Event is a published event; Body is the exact envelope every delivery
// of it sends.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt int64           `json:"created_at"`
	Body      json.RawMessage `json:"body"`
}

// newEvent makes an event of typ created at now, with its envelope. The
// object goes in as it was published, compacted but not HTML-escaped:
// "<", ">" and "&" arrive as sent, not as \u003c and the like.
func newEvent(typ string, object json.RawMessage, now time.Time) *Event {
	ev := &Event{ID: NewID("evt_"), Type: typ, CreatedAt: now.Unix()}
	var env struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		CreatedAt int64  `json:"created_at"`
		Data      struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	env.ID, env.Type, env.CreatedAt, env.Data.Object = ev.ID, typ, ev.CreatedAt, object
	ev.Body, _ = marshalRecord(env)
	return ev
}
