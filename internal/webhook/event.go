package webhook

import (
	"bytes"
	"encoding/json"
	"time"
)

// newEvent makes an event of typ created at now, with its envelope. The
// object goes in as it was published, compacted but not HTML-escaped:
// "<", ">" and "&" arrive as sent, not as \u003c and the like.
func newEvent(typ string, object json.RawMessage, now time.Time) *Event {
	ev := &Event{ID: NewID("evt_"), Type: typ, CreatedAt: now.Unix()}
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
