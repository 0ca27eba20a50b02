package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"deeplink/internal/store"
)

// records is the webhook state of record in a store.Store, read and
// written per request, with no lock shared by replicas:
//
//   - an endpoint is its record (hooks:ep:<id>), changed by
//     CompareAndSwap on its bytes (changeEndpoint);
//   - a store's endpoints are listed, in the order they were made, in one
//     record (hooks:eps:<store id>), changed by CompareAndSwap: of
//     creations racing for a store's last place, one gets it;
//   - a delivery is its record (hooks:dlv:<id>), with its event; an
//     endpoint's log is a sorted set of its deliveries (hooks:log:<id>)
//     by when they were made; its pending ones are in the queue
//     (queue.go);
//   - an Idempotency-Key is one Insert (hooks:idem:<store id>\x00<key>),
//     holding what its publish made, so that a replay finds it
//     (publish.go).
type records struct {
	st     store.Store
	now    func() time.Time
	budget *budgets // nil: none (tests of what budgets leave alone)
	// failed is told of the deliveries failQueued failed. nil: none is.
	failed func(ctx context.Context, storeID string, ds []*Delivery)
	// busy reports whether this process has an attempt of the delivery
	// dlv of the endpoint ep under way; failQueued leaves those to it.
	// nil: none is.
	busy func(ep, dlv string) bool
}

// Records of the webhook state, as JSON (but deliveries:
// deliveryrecord.go), under hooks:<kind>:<id>. Builds before the state of
// record also listed each kind's ids in the sorted set hooks:index:<kind>,
// and kept events in records of their own (upgrade.go reads those).
const (
	kindEndpoint = "ep"
	kindEvent    = "evt"
	kindDelivery = "dlv"
	kindIdem     = "idem"

	listKey = "hooks:eps:"
	logKey  = "hooks:log:"
)

func hookKey(kind, id string) string { return "hooks:" + kind + ":" + id }
func hookIndex(kind string) string   { return "hooks:index:" + kind }

// marshalRecord encodes v as JSON without escaping HTML: an event's body
// is kept byte for byte as it is sent ("<" stays "<"); but a delivery,
// which has a format of its own (deliveryrecord.go).
func marshalRecord(v any) ([]byte, error) {
	if d, ok := v.(*Delivery); ok {
		return d.appendRecord(nil), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// readRecord reads the record key as a T (decodeRecord), with its bytes.
func readRecord[T any](ctx context.Context, st store.Store, key string) ([]byte, *T, error) {
	b, err := st.Get(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	v, err := decodeRecord[T](key, b)
	return b, v, err
}

// decodeRecord decodes b, the record key, as a T: JSON, but a delivery
// written in its own format (deliveryrecord.go), whose event's body then
// shares b's bytes.
func decodeRecord[T any](key string, b []byte) (*T, error) {
	v := new(T)
	var err error
	if d, ok := any(v).(*Delivery); ok && len(b) > 0 && b[0] == deliveryTag {
		err = d.parseRecord(b)
	} else {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return nil, fmt.Errorf("webhooks: record %s: %w", key, err)
	}
	return v, nil
}

// endpointIDs returns the ids listed for the store, and the list's bytes
// (nil when there is none).
func (r *records) endpointIDs(ctx context.Context, storeID string) ([]byte, []string, error) {
	raw, err := r.st.Get(ctx, listKey+storeID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	ids, err := listedIDs(storeID, raw)
	return raw, ids, err
}

// listedIDs returns the ids the store's list raw holds (none when raw is
// nil: no list).
func listedIDs(storeID string, raw []byte) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("webhooks: the endpoints of store %s: %w", storeID, err)
	}
	return ids, nil
}

// storeEndpoints returns the store's endpoints in the order they were
// made. An id listed without a record (a delete cut short between the
// two) is left out.
func (r *records) storeEndpoints(ctx context.Context, storeID string) ([]*Endpoint, error) {
	_, ids, err := r.endpointIDs(ctx, storeID)
	if err != nil {
		return nil, err
	}
	return r.endpoints(ctx, ids)
}

// endpoints reads the endpoints ids in one call (decodeEndpoints).
func (r *records) endpoints(ctx context.Context, ids []string) ([]*Endpoint, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = hookKey(kindEndpoint, id)
	}
	raws, err := r.st.GetMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	return decodeEndpoints(keys, raws)
}

// decodeEndpoints returns the endpoints whose records, under keys, read
// as raws; a key without a record is left out.
func decodeEndpoints(keys []string, raws [][]byte) ([]*Endpoint, error) {
	list := make([]*Endpoint, 0, len(keys))
	for i, raw := range raws {
		if raw == nil {
			continue
		}
		e, err := endpointMemo.decode(keys[i], raw)
		if err != nil {
			return nil, err
		}
		list = append(list, e)
	}
	return list, nil
}

// endpoint returns the endpoint id of the store, with its record's bytes.
func (r *records) endpoint(ctx context.Context, storeID, id string) ([]byte, *Endpoint, error) {
	raw, e, err := endpointMemo.read(ctx, r.st, hookKey(kindEndpoint, id))
	if errors.Is(err, store.ErrNotFound) || err == nil && e.StoreID != storeID {
		return nil, nil, ErrNoEndpoint
	}
	return raw, e, err
}

// createEndpoint makes e, an endpoint of its store with its places in the
// queue, and lists it, unless the store has MaxEndpointsPerStore:
// ErrEndpointCap, and nothing made.
func (r *records) createEndpoint(ctx context.Context, e *Endpoint) error {
	b, _ := marshalRecord(e) // an Endpoint always encodes
	// The record first: listed, it is whole. One never listed (a crash,
	// or the cap) is no one's.
	if err := r.st.Apply(ctx, append(placesWrites(e.ID), store.Write{Key: hookKey(kindEndpoint, e.ID), Val: b})); err != nil {
		return err
	}
	err := r.editList(ctx, e.StoreID, func(ids []string) ([]string, error) {
		live := ids[:0:0]
		for _, id := range ids { // without those a delete left listed
			if _, err := r.st.Get(ctx, hookKey(kindEndpoint, id)); err == nil {
				live = append(live, id)
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
		}
		if len(live) >= MaxEndpointsPerStore {
			return nil, ErrEndpointCap
		}
		return append(live, e.ID), nil
	})
	if errors.Is(err, ErrEndpointCap) {
		r.st.Apply(ctx, r.endpointGone(e.ID))
	}
	return err
}

// editList sets the store's list of endpoint ids to what f makes of it,
// by CompareAndSwap: a change made meanwhile by another is read again
// and f applied to it. An error from f is returned, nothing written.
func (r *records) editList(ctx context.Context, storeID string, f func(ids []string) ([]string, error)) error {
	for {
		raw, ids, err := r.endpointIDs(ctx, storeID)
		if err != nil {
			return err
		}
		next, err := f(ids)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(next)
		if err := r.st.CompareAndSwap(ctx, listKey+storeID, raw, b, time.Time{}); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
}

// changeEndpoint applies f to the endpoint id of the store and writes it,
// by CompareAndSwap on the bytes f saw, as editList does the list.
func (r *records) changeEndpoint(ctx context.Context, storeID, id string, f func(e *Endpoint) error) (*Endpoint, error) {
	for {
		raw, e, err := r.endpoint(ctx, storeID, id)
		if err != nil {
			return nil, err
		}
		if err := f(e); err != nil {
			return nil, err
		}
		b, _ := marshalRecord(e) // an Endpoint always encodes
		if err := r.st.CompareAndSwap(ctx, hookKey(kindEndpoint, id), raw, b, time.Time{}); !errors.Is(err, store.ErrConflict) {
			return e, err
		}
	}
}

// deleteEndpoint deletes the endpoint id of the store: its deliveries and
// their log and queue first, then its record (a sender then drops what it
// claims of it), then its place in the store's list; so that one cut
// short is made whole by being asked again. A pending delivery is deleted
// on condition (editDelivery), so that one a sender ends meanwhile is its
// (ended: given back once): it returns the pending ones it deleted.
func (r *records) deleteEndpoint(ctx context.Context, storeID, id string) ([]*Delivery, error) {
	if _, _, err := r.endpoint(ctx, storeID, id); err != nil {
		return nil, err
	}
	var pending []*Delivery
	var ws []store.Write
	for _, set := range []string{logKey + id, queueDue + id, doneKey + id} {
		ms, err := r.st.ZRange(ctx, set, math.MinInt64, math.MaxInt64, 0, false)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			ws = append(ws, store.Write{Key: set, Member: m.Member})
			if set != logKey+id {
				continue
			}
			key := hookKey(kindDelivery, m.Member)
			d, err := r.editDelivery(ctx, m.Member, func(raw []byte, d *Delivery) []store.Write {
				if d.Status != StatusPending {
					ws = append(ws, store.Write{Key: key})
					return nil
				}
				return []store.Write{{Key: key, Old: raw}} // ended meanwhile: then deleted as finished
			})
			if err != nil {
				return nil, err
			}
			if d != nil {
				pending = append(pending, d)
			}
		}
	}
	ws = append(ws, store.Write{Key: logBytesKey + id})
	if err := r.st.Apply(ctx, ws); err != nil {
		return pending, err
	}
	if err := r.st.Apply(ctx, r.endpointGone(id)); err != nil {
		return pending, err
	}
	return pending, r.editList(ctx, storeID, func(ids []string) ([]string, error) {
		return slices.DeleteFunc(ids, func(x string) bool { return x == id }), nil
	})
}

// endpointGone are the writes that remove an endpoint's record, its
// places and its entry among the endpoints with something due.
func (r *records) endpointGone(id string) []store.Write {
	ws := []store.Write{{Key: hookKey(kindEndpoint, id)}, {Key: queueReady, Member: id}}
	for _, w := range placesWrites(id) {
		ws = append(ws, store.Write{Key: w.Key, Member: w.Member})
	}
	return ws
}

// moveWindowOf makes moveWindow's change (ok: the attempt succeeded) in
// e's record, when there is one. It returns e as it then is, and whether
// this disabled it: the caller then fails e's queue (failQueued), a
// sender once its attempt's outcome is written.
func (r *records) moveWindowOf(ctx context.Context, e *Endpoint, ok bool, now time.Time, after time.Duration) (*Endpoint, bool, error) {
	if c := *e; !moveWindow(&c, ok, now, after) && c.FailingSince == e.FailingSince {
		return e, false, nil // nothing to write
	}
	disabled := false
	e, err := r.changeEndpoint(ctx, e.StoreID, e.ID, func(e *Endpoint) error {
		disabled = moveWindow(e, ok, now, after)
		return nil
	})
	return e, disabled && err == nil, err
}

// failQueued fails at once, without an attempt, the deliveries queued
// for e that drop picks, each with the reason e refuses it (disabled, or
// no longer subscribed to its type), and takes them out of the queue:
// what a request that disables e, or drops a type, does in the same step
// as the change. One whose attempt is under way (claimed: its queue
// score past its own due time) is left to that attempt, whose outcome is
// judged by the endpoint as it then is. It tells r.failed of those it
// failed, and returns them.
func (r *records) failQueued(ctx context.Context, e *Endpoint, drop func(d *Delivery) bool) (n []*Delivery, err error) {
	queued, err := r.st.ZRange(ctx, queueDue+e.ID, math.MinInt64, math.MaxInt64, 0, false)
	if err != nil {
		return nil, err
	}
	if r.failed != nil {
		defer func() { r.failed(ctx, e.StoreID, n) }()
	}
	now := r.now().UnixMilli()
	for _, m := range queued {
		d, err := r.editDelivery(ctx, m.Member, func(raw []byte, d *Delivery) []store.Write {
			if d.Status != StatusPending || d.Event == nil || !drop(d) ||
				r.busy != nil && r.busy(e.ID, d.ID) || m.Score > now && claimed(d, m.Score) {
				return nil // ended, kept, or under way here or (claimed) elsewhere
			}
			d.Status, d.NextAt, d.Reason = StatusFailed, 0, cmp.Or(e.refusal(d), ReasonDisabled)
			b := d.appendRecord(nil)
			d.written = len(b)
			// On condition: an attempt's outcome written first has it judged again.
			return []store.Write{{Key: hookKey(kindDelivery, d.ID), Val: b, Old: raw}, {Key: queueDue + e.ID, Member: d.ID}}
		})
		if err != nil {
			return n, err
		}
		if d != nil {
			n = append(n, d)
		}
	}
	return n, (&queue{st: r.st}).refresh(ctx, e.ID)
}

// editDelivery reads the delivery id and makes the writes f decides on
// for it (nil: none), the first on condition that the record still holds
// raw: one changed meanwhile is read and decided on again. It returns the
// delivery as f left it once its writes are made; nil when its record is
// gone or f made none.
func (r *records) editDelivery(ctx context.Context, id string, f func(raw []byte, d *Delivery) []store.Write) (*Delivery, error) {
	for {
		raw, d, err := readRecord[Delivery](ctx, r.st, hookKey(kindDelivery, id))
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		ws := f(raw, d)
		if ws == nil {
			return nil, nil
		}
		if err := r.st.Apply(ctx, ws); !errors.Is(err, store.ErrConflict) {
			return d, err
		}
	}
}
