package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"deeplink/internal/store"
)

// idemRecord is what an Idempotency-Key holds: the event its publish
// made and the deliveries it makes of it, and whether they are written
// (Done, written last in the publish's Apply). A replay of a publish
// whose Apply a crash cut short makes what is missing; one of a publish
// still under way waits for it.
type idemRecord struct {
	Store      string            `json:"store,omitempty"`
	EventID    string            `json:"event_id"`
	Expires    int64             `json:"expires"`         // unix seconds
	Event      *Event            `json:"event,omitempty"` // absent in the keys of earlier builds
	Deliveries map[string]string `json:"deliveries,omitempty"`
	Made       int64             `json:"made,omitempty"` // unix nanoseconds of the Insert
	Done       bool              `json:"done,omitempty"`
}

// errPublishUnderWay: a publish with the same Idempotency-Key began
// within publishDeadline and has not written its deliveries yet; the
// caller answers 503, and the client's retry finds them.
var errPublishUnderWay = fmt.Errorf("webhooks: a publish with this Idempotency-Key is under way: %w", store.ErrUnavailable)

// publishDeadline is how long a publish may take before a replay of its
// Idempotency-Key takes it for cut short and makes what it did not.
const publishDeadline = 10 * time.Second

// enqueueRecord returns the writes that make d, logged on its endpoint and
// queued, due at due.
func enqueueRecord(d *Delivery, due time.Time) []store.Write {
	ws := []store.Write{
		{Key: hookKey(kindDelivery, d.ID), Val: d.appendRecord(nil)},
		{Key: logKey + d.EndpointID, Member: d.ID, Val: member, Score: d.LoggedAt},
	}
	return append(ws, enqueueWrites(d.EndpointID, d.ID, due)...)
}

// newDelivery is a pending delivery of ev to the endpoint ep of the store
// storeID, made at now.
func newDelivery(storeID, ep string, ev *Event, now time.Time) *Delivery {
	return &Delivery{ID: NewID("dlv_"), EndpointID: ep, StoreID: storeID, EventID: ev.ID, Status: StatusPending,
		CreatedAt: now.Unix(), NextAt: now.UnixNano(), LoggedAt: now.UnixMicro(), Event: ev}
}

// publish makes an event of typ for the store and a delivery of it to
// every enabled endpoint subscribed to typ, in one Apply after the
// Idempotency-Key's Insert. A key seen in the last 24 hours returns that
// event's id and makes nothing (but what a publish cut short did not
// write: replay). Past the store's budgets it makes nothing:
// ErrOverBudget, but for a key it has seen.
//
// Its store calls: one GetMany of the store's list of endpoints, its
// budgets' counters and the endpoints listed (listMemo), the key's
// Insert (when keyed), and the Apply, which counts what it makes.
func (r *records) publish(ctx context.Context, storeID, typ string, object json.RawMessage, key string) (string, error) {
	now := r.now()
	day := now.Unix() / 86400
	guess := listMemo.get(storeID)
	// What the GetMany reads, in this order: the list, the pending count,
	// the keys made today and yesterday, then the endpoints guessed.
	const list, pendingCount, idemToday, guessed = 0, 1, 2, 4
	keys := []string{listKey + storeID, pendingKey + storeID, idemDayKey(storeID, day), idemDayKey(storeID, day-1)}
	for _, id := range guess.ids {
		keys = append(keys, hookKey(kindEndpoint, id))
	}
	read, err := r.st.GetMany(ctx, keys)
	if err != nil {
		return "", err
	}
	var eps []*Endpoint
	if bytes.Equal(read[list], guess.raw) {
		eps, err = decodeEndpoints(keys[guessed:], read[guessed:])
	} else { // the list changed since: its endpoints read now
		var ids []string
		if ids, err = listedIDs(storeID, read[list]); err == nil {
			listMemo.put(storeID, read[list], ids)
			eps, err = r.endpoints(ctx, ids)
		}
	}
	if err != nil {
		return "", err
	}
	pending, err := counted(pendingKey+storeID, read[pendingCount])
	if err != nil {
		return "", err
	}
	ev := newEvent(typ, object, now)
	m := idemRecord{Store: storeID, EventID: ev.ID, Expires: now.Add(idempotencyTTL).Unix(), Event: ev, Deliveries: map[string]string{}, Made: now.UnixNano()}
	for _, e := range eps {
		if e.Enabled && e.subscribed(typ) {
			m.Deliveries[NewID("dlv_")] = e.ID
		}
	}
	k := hookKey(kindIdem, storeID+"\x00"+key)
	if key != "" && r.budget != nil {
		if err := idemRoom(storeID, day, read[idemToday:guessed], r.budget.Idem); errors.Is(err, ErrOverBudget) {
			if evt, err := r.replay(ctx, k); !errors.Is(err, store.ErrNotFound) {
				return evt, err
			}
			return "", ErrOverBudget
		} else if err != nil {
			return "", err
		}
	}
	var first []store.Write
	if key != "" {
		b, err := json.Marshal(m)
		if err != nil {
			return "", err
		}
		switch err := r.st.Insert(ctx, k, b, time.Unix(m.Expires, 0)); {
		case errors.Is(err, store.ErrExists):
			return r.replay(ctx, k)
		case err != nil:
			return "", err
		}
		if r.budget != nil { // kept until tomorrow's end, when idemRoom reads it as yesterday's
			first = append(first, store.Write{Key: idemDayKey(storeID, day), Add: 1, Exp: time.Unix((day+2)*86400, 0)})
		}
	}
	return ev.ID, r.make(ctx, k, key != "", m, nil, pending, first)
}

// make writes, in one Apply: first; the deliveries m lists but those in
// have (written whole already), logged and queued; what they hold, added
// to the store's pending count; and, when keyed, m marked done, last.
// pending is the store's pending count as read before it: past the
// budget with the new deliveries, it makes nothing (ErrOverBudget). A
// delivery in have whose log or queue entries an earlier Apply did not
// get to is given them again.
func (r *records) make(ctx context.Context, k string, keyed bool, m idemRecord, have map[string]*Delivery, pending int64, first []store.Write) error {
	now := r.now()
	ws := append(make([]store.Write, 0, len(first)+4*len(m.Deliveries)+2), first...)
	made := 0
	for id, ep := range m.Deliveries {
		d := have[id]
		if d == nil {
			d = newDelivery(m.Store, ep, m.Event, now)
			d.ID = id
			made++
		}
		w := enqueueRecord(d, now)
		if have[id] != nil {
			w = w[1:] // the record is there: its log and queue entries, again
			if d.Status != StatusPending {
				w = w[:1]
			}
		}
		ws = append(ws, w...)
	}
	if cost := pendingCost(made, made*len(m.Event.Body)); made > 0 && r.budget != nil {
		if pending+cost > r.budget.Pending {
			return ErrOverBudget
		}
		ws = append(ws, store.Write{Key: pendingKey + m.Store, Add: cost})
	}
	if keyed {
		m.Done = true
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		ws = append(ws, store.Write{Key: k, Val: b, Exp: time.Unix(m.Expires, 0)})
	}
	if len(ws) == 0 {
		return nil
	}
	// Failed, it is not answered 2xx, and nothing is given back: the
	// count is written after the deliveries, and Apply keeps the first of
	// its writes when it keeps some, so a count made is one of
	// deliveries made, whose ends give it back; deliveries made without
	// their count give back what was not counted, and the count errs
	// low, not high.
	return r.st.Apply(ctx, ws)
}

// replay answers a publish whose Idempotency-Key k is taken: the first
// publish's event id once what it makes is written. One older than
// publishDeadline and not done was cut short: what it did not write is
// made now.
func (r *records) replay(ctx context.Context, k string) (string, error) {
	b, err := r.st.Get(ctx, k)
	if err != nil {
		return "", err // expired meanwhile: ErrNotFound, as a 503 the client retries
	}
	var m idemRecord
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("webhooks: an Idempotency-Key's record: %w", err)
	}
	if m.Done || m.Event == nil { // a key of an earlier build: made whole
		return m.EventID, nil
	}
	if r.now().Sub(time.Unix(0, m.Made)) < publishDeadline {
		return "", errPublishUnderWay
	}
	have := map[string]*Delivery{}
	for id := range m.Deliveries {
		switch _, d, err := readRecord[Delivery](ctx, r.st, hookKey(kindDelivery, id)); {
		case err == nil:
			have[id] = d
		case !errors.Is(err, store.ErrNotFound):
			return "", err
		}
	}
	pending, err := r.counter(ctx, pendingKey+m.Store)
	if err != nil {
		return "", err
	}
	return m.EventID, r.make(ctx, k, true, m, have, pending, nil)
}
