package webhook

import (
	"bytes"
	"encoding/json"
	"time"
)

// publishLocked makes an event of typ for the store and enqueues it for
// every enabled endpoint subscribed to typ. A key seen in the last 24
// hours returns that event's id and sends nothing. It makes nothing, and
// reports false, when that would take the store past its budget. hk.Mu
// must be held.
func (hk *Hooks) publishLocked(storeID, typ string, object json.RawMessage, key string) (eventID string, ok bool) {
	now := time.Now()
	k := storeID + "\x00" + key
	prev, seen := hk.Idem[k]
	if key != "" {
		if seen && now.Unix() < prev.Expires {
			return prev.EventID, true
		}
		if !seen && hk.IdemCount[storeID] >= hk.Budget.Idem {
			return "", false
		}
	}
	ev := hk.NewEventLocked(typ, object)
	var to []*Endpoint
	for _, e := range hk.ByStore[storeID] {
		if e.Enabled && e.subscribed(typ) {
			to = append(to, e)
		}
	}
	if !hk.RoomLocked(storeID, len(to), len(ev.Body)) {
		return "", false
	}
	for _, e := range to {
		hk.EnqueueLocked(e, ev)
	}
	if key != "" {
		if !seen {
			hk.IdemCount[storeID]++
		}
		exp := now.Add(IdempotencyTTL).Unix()
		hk.Idem[k] = idem{EventID: ev.ID, Expires: exp}
		// Every key lives idempotencyTTL, so the queue stays in order of
		// expiry but for the wall clock stepping back, which only keeps
		// the keys after a step a little longer than their TTL.
		hk.IdemQueue = append(hk.IdemQueue, IdemEntry{k, exp})
		hk.TouchLocked(kindIdem, k)
	}
	return ev.ID, true
}

// NewEventLocked makes an event with its envelope, dated by hk.Now.
// hk.Mu must be held.
func (hk *Hooks) NewEventLocked(typ string, object json.RawMessage) *Event {
	return newEvent(typ, object, hk.Now())
}

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
