package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"deeplink/internal/store"
)

// The engine's operations, what the service's HTTP handlers call: each
// finds the endpoint (and delivery) it works on in the store named, does
// its own locking and, for a change, returns only once what it changed is
// written (Persist). A change refused, or one whose write failed, returns
// an error wrapping store.ErrUnavailable; the caller answers 503.

var (
	ErrNoEndpoint  = errors.New("no webhook endpoint with that id in this store")
	ErrNoDelivery  = errors.New("no delivery with that id for this endpoint")
	ErrBadCursor   = errors.New("is not a cursor this endpoint returned")
	ErrEndpointCap = errors.New("this store already has 5 webhook endpoints, the most allowed; delete one first")
	// ErrOverBudget: the change would take the store past its budget of
	// pending deliveries or of remembered Idempotency-Keys; nothing was
	// made.
	ErrOverBudget = errors.New("this store's undelivered webhooks, or its remembered Idempotency-Keys, are over their memory budget")
	// ErrUnwritable: changes cannot be written now (the store refuses
	// them, or the last write failed).
	ErrUnwritable = fmt.Errorf("webhooks: changes cannot be written now: %w", store.ErrUnavailable)
	// ErrUnreadable: the store of its own that holds the state (Redis)
	// does not answer, and reads wait for it as changes do.
	ErrUnreadable = fmt.Errorf("webhooks: the store does not answer: %w", store.ErrUnavailable)
)

// EndpointChange is what creating or changing an endpoint sets: a nil
// field is left as it is (creation: as a new endpoint has it).
type EndpointChange struct {
	URL, Description *string
	Events           []string
	Enabled          *bool
}

// apply sets the fields c gives on e, updated at now (unix seconds). A
// change that disables e, creation with enabled false included, makes
// its reason manual; one that enables it clears the reason and e's
// failure window.
func (c *EndpointChange) apply(e *Endpoint, now int64) {
	if c.URL != nil {
		e.URL = *c.URL
	}
	if c.Description != nil {
		e.Description = *c.Description
	}
	if c.Events != nil {
		e.Events = c.Events
	}
	if c.Enabled != nil && *c.Enabled != e.Enabled {
		e.Enabled = *c.Enabled
		if e.Enabled {
			// Judged from its next attempts on, not by failures from
			// before the merchant turned it back on.
			e.DisabledReason, e.FailingSince = "", 0
		} else {
			e.DisabledReason = DisabledManual
		}
	}
	e.UpdatedAt = now
}

// change runs f under hk.Mu on the endpoint id of the store storeID (nil
// when id is ""), and writes what it changed before returning. With
// replicas sharing the state, it runs under their lock, on a copy caught
// up (share.go). The endpoint is looked up before the refusal
// (ErrUnwritable), so that an unknown one is ErrNoEndpoint whatever the
// store's state. An error from f means it changed nothing.
func (hk *Hooks) change(ctx context.Context, storeID, id string, f func(e *Endpoint) error) error {
	if hk.Share != nil {
		work, unlock, err := hk.Lock(ctx)
		if err != nil {
			return err
		}
		defer unlock()
		ctx = work
	}
	if hk.PersistBad.Load() {
		hk.Persist(ctx) // what the last one left: the refusal tells how it went
	}
	hk.Mu.Lock()
	var e *Endpoint
	err := error(nil)
	if id != "" {
		if e = hk.endpointLocked(storeID, id); e == nil {
			err = ErrNoEndpoint
		}
	}
	if err == nil {
		err = hk.refusal()
	}
	if err == nil {
		err = f(e)
	}
	hk.Mu.Unlock()
	if err != nil {
		return err
	}
	return hk.Persist(ctx)
}

// Writable returns ErrUnwritable while changes cannot be written (the
// store refuses them, or the last write failed and failed again now), and
// nil otherwise: for a caller that refuses a change before it reads the
// request's body, as the change itself would refuse.
func (hk *Hooks) Writable(ctx context.Context) error {
	if hk.PersistBad.Load() {
		hk.Sync(ctx) // what the last write left (under the lock when shared): the refusal tells how it went
	}
	return hk.refusal()
}

// refusal is Writable without the write: ErrUnwritable while the store
// refuses changes or the last write failed.
func (hk *Hooks) refusal() error {
	if hk.Failing() != nil || hk.PersistBad.Load() {
		return ErrUnwritable
	}
	return nil
}

// read runs f under hk.Mu on the endpoint id of the store storeID (nil
// when id is ""), once the copy has taken in what other replicas sharing
// it changed: what any replica answered is then seen.
func (hk *Hooks) read(ctx context.Context, storeID, id string, f func(e *Endpoint) error) error {
	if hk.Share != nil {
		if err := hk.Fresh(ctx); err != nil {
			return err
		}
	}
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	var e *Endpoint
	if id != "" {
		if e = hk.endpointLocked(storeID, id); e == nil {
			return ErrNoEndpoint
		}
	}
	if hk.ReadFailing() != nil {
		return ErrUnreadable
	}
	return f(e)
}

// endpointLocked returns the endpoint id of the store storeID, or nil.
// hk.Mu must be held.
func (hk *Hooks) endpointLocked(storeID, id string) *Endpoint {
	if e := hk.Endpoints[id]; e != nil && e.StoreID == storeID {
		return e
	}
	return nil
}

// CreateEndpoint makes an endpoint of the store with c, enabled unless c
// says otherwise, and returns it as the API shows it, with its secret.
// ErrEndpointCap when the store has MaxEndpointsPerStore already.
func (hk *Hooks) CreateEndpoint(ctx context.Context, storeID string, c EndpointChange) (v map[string]any, err error) {
	err = hk.change(ctx, storeID, "", func(*Endpoint) error {
		if len(hk.ByStore[storeID]) >= MaxEndpointsPerStore {
			return ErrEndpointCap
		}
		made := time.Now()
		e := &Endpoint{ID: NewID("we_"), StoreID: storeID, Enabled: true, CreatedAt: made.Unix(), CreatedNS: made.UnixNano(), Secret: NewSecret()}
		c.apply(e, made.Unix())
		hk.AddEndpointLocked(e)
		hk.TouchLocked(KindEndpoint, e.ID)
		v = e.View()
		v["secret"] = e.Secret
		return nil
	})
	return v, err
}

// StoreEndpoints returns the store's endpoints in the order they were made,
// as the API shows them (no secret).
func (hk *Hooks) StoreEndpoints(ctx context.Context, storeID string) (list []map[string]any, err error) {
	err = hk.read(ctx, storeID, "", func(*Endpoint) error {
		list = make([]map[string]any, 0, len(hk.ByStore[storeID]))
		for _, e := range hk.ByStore[storeID] {
			list = append(list, e.View())
		}
		return nil
	})
	return list, err
}

// Endpoint returns the endpoint id of the store as the API shows it.
func (hk *Hooks) Endpoint(ctx context.Context, storeID, id string) (v map[string]any, err error) {
	err = hk.read(ctx, storeID, id, func(e *Endpoint) error {
		v = e.View()
		return nil
	})
	return v, err
}

// Secret returns the signing secret of the endpoint id of the store.
func (hk *Hooks) Secret(ctx context.Context, storeID, id string) (secret string, err error) {
	err = hk.read(ctx, storeID, id, func(e *Endpoint) error {
		secret = e.Secret
		return nil
	})
	return secret, err
}

// ChangeEndpoint sets on the endpoint id of the store what c gives, and
// returns it as the API shows it. Disabling it fails what is queued for
// it; dropping event types fails what is queued of those
// (DropQueuedLocked), in the same step.
func (hk *Hooks) ChangeEndpoint(ctx context.Context, storeID, id string, c EndpointChange) (v map[string]any, err error) {
	err = hk.change(ctx, storeID, id, func(e *Endpoint) error {
		wasEnabled := e.Enabled
		c.apply(e, time.Now().Unix())
		switch {
		case wasEnabled && !e.Enabled:
			hk.DropQueuedLocked(e, DropAll)
		case c.Events != nil:
			hk.DropQueuedLocked(e, e.RefusesLocked)
		}
		hk.TouchLocked(KindEndpoint, e.ID)
		v = e.View()
		return nil
	})
	return v, err
}

// DeleteEndpoint deletes the endpoint id of the store, its log and what
// is queued for it.
func (hk *Hooks) DeleteEndpoint(ctx context.Context, storeID, id string) error {
	return hk.change(ctx, storeID, id, func(e *Endpoint) error {
		hk.RemoveEndpointLocked(e)
		return nil
	})
}

// RotateSecret gives the endpoint id of the store a new secret; the old
// one also signs for webhooks.secret_rotation_grace. It returns the
// endpoint as the API shows it, with the new secret.
func (hk *Hooks) RotateSecret(ctx context.Context, storeID, id string) (v map[string]any, err error) {
	err = hk.change(ctx, storeID, id, func(e *Endpoint) error {
		now := time.Now()
		e.OldSecret, e.OldSecretEnd = e.Secret, now.Add(hk.Cfg.Webhooks.SecretRotationGrace.D()).Unix()
		e.Secret = NewSecret()
		e.UpdatedAt = now.Unix()
		hk.TouchLocked(KindEndpoint, e.ID)
		v = e.View()
		v["secret"] = e.Secret
		return nil
	})
	return v, err
}

// testObject is the data.object of the test call's event.
const testObject = `{"id":"test","message":"This is a test event from the webhook settings."}`

// SendTest queues a webhook.test event for the endpoint id of the store
// alone: it goes once even if the endpoint is disabled.
func (hk *Hooks) SendTest(ctx context.Context, storeID, id string) (eventID, deliveryID string, err error) {
	err = hk.change(ctx, storeID, id, func(e *Endpoint) error {
		ev := hk.NewEventLocked(EventTest, json.RawMessage(testObject))
		if !hk.RoomLocked(e.StoreID, 1, len(ev.Body)) {
			return ErrOverBudget
		}
		d := hk.RetryLocked(e, ev)
		eventID, deliveryID = ev.ID, d.ID
		return nil
	})
	return eventID, deliveryID, err
}

// Publish makes an event of typ for the store and queues it for every
// enabled endpoint subscribed to typ. A key seen in the last 24 hours
// returns that event's id and sends nothing.
func (hk *Hooks) Publish(ctx context.Context, storeID, typ string, object json.RawMessage, key string) (eventID string, err error) {
	err = hk.change(ctx, storeID, "", func(*Endpoint) error {
		var ok bool
		if eventID, ok = hk.publishLocked(storeID, typ, object, key); !ok {
			return ErrOverBudget
		}
		return nil
	})
	return eventID, err
}

// Retry queues the event of the delivery dlvID of the endpoint id again,
// as a new delivery (RetryLocked), and returns that as the log lists it.
func (hk *Hooks) Retry(ctx context.Context, storeID, id, dlvID string) (v map[string]any, err error) {
	err = hk.change(ctx, storeID, id, func(e *Endpoint) error {
		old := hk.Deliv[dlvID]
		if old == nil || old.EndpointID != e.ID {
			return ErrNoDelivery
		}
		if !hk.RoomLocked(e.StoreID, 1, len(old.Ev.Body)) {
			return ErrOverBudget
		}
		v = hk.RetryLocked(e, old.Ev).Summary()
		return nil
	})
	return v, err
}

// Recover queues again, now, every failed delivery of the endpoint id
// whose event was created at or after since (RecoverLocked), and returns
// how many it queued.
func (hk *Hooks) Recover(ctx context.Context, storeID, id string, since time.Time) (n int, err error) {
	err = hk.change(ctx, storeID, id, func(e *Endpoint) error {
		var ok bool
		if n, ok = hk.RecoverLocked(e, since); !ok {
			return ErrOverBudget
		}
		return nil
	})
	return n, err
}

// Delivery returns the delivery dlvID of the endpoint id with every
// attempt, as the API shows it.
func (hk *Hooks) Delivery(ctx context.Context, storeID, id, dlvID string) (v map[string]any, err error) {
	err = hk.read(ctx, storeID, id, func(e *Endpoint) error {
		d := hk.Deliv[dlvID]
		if d == nil || d.EndpointID != e.ID {
			return ErrNoDelivery
		}
		v = d.Detail(e)
		return nil
	})
	return v, err
}

// DeliveryQuery is a page of an endpoint's delivery log: of one event
// type and status ("": any), Limit of them, below Cursor (a next_cursor
// the log gave, for this endpoint: ValidCursor; "": from the newest).
type DeliveryQuery struct {
	EventType, Status string
	Limit             int
	Cursor            string
}

// Deliveries returns a page of the endpoint id's log, newest first, as
// the log lists them, and the cursor of the next page ("" when none).
func (hk *Hooks) Deliveries(ctx context.Context, storeID, id string, q DeliveryQuery) (page []map[string]any, next string, err error) {
	before := uint64(1<<64 - 1)
	if q.Cursor != "" {
		var ok bool
		if before, ok = parseCursor(id, q.Cursor); !ok {
			return nil, "", ErrBadCursor
		}
	}
	err = hk.read(ctx, storeID, id, func(e *Endpoint) error {
		page = []map[string]any{}
		var lastSeq uint64 // of the last delivery on the page
		for i := len(e.Log) - 1; i >= 0; i-- {
			d := e.Log[i]
			if d.Seq >= before || q.EventType != "" && d.Ev.Type != q.EventType || q.Status != "" && d.Status != q.Status {
				continue
			}
			if len(page) == q.Limit {
				next = cursorFor(e.ID, lastSeq)
				break
			}
			page = append(page, d.Summary())
			lastSeq = d.Seq
		}
		return nil
	})
	return page, next, err
}

// Counts is how many deliveries succeeded, failed, and are pending.
type Counts struct{ Succeeded, Failed, Pending int }

// LastDay counts the deliveries of the endpoint id made in each of the
// 24 hours before end, oldest hour first, by their status.
func (hk *Hooks) LastDay(ctx context.Context, storeID, id string, end time.Time) (hours [24]Counts, err error) {
	start := end.Add(-24 * time.Hour)
	err = hk.read(ctx, storeID, id, func(e *Endpoint) error {
		for _, d := range e.Log {
			at := time.Unix(d.CreatedAt, 0)
			if at.Before(start) || !at.Before(end) {
				continue
			}
			h := &hours[int(at.Sub(start)/time.Hour)]
			switch d.Status {
			case StatusSucceeded:
				h.Succeeded++
			case StatusFailed:
				h.Failed++
			default:
				h.Pending++
			}
		}
		return nil
	})
	return hours, err
}

// cursorFor is the next_cursor that continues the log of the endpoint id
// below seq: seq and a tag of the id, so that every other endpoint
// refuses it.
func cursorFor(id string, seq uint64) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)
	return base64.RawURLEncoding.EncodeToString(append(b, cursorTag(id)...))
}

// parseCursor returns the sequence number of a cursor cursorFor made for
// the endpoint id, or false for anything else.
func parseCursor(id, c string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 12 || string(b[8:]) != string(cursorTag(id)) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// ValidCursor reports whether c is a next_cursor of the endpoint id's log.
func ValidCursor(id, c string) bool {
	_, ok := parseCursor(id, c)
	return ok
}

// cursorTag is the part of an endpoint's cursors that names it.
func cursorTag(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:4]
}
