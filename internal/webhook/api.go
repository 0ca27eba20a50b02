package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"deeplink/internal/signature"
	"deeplink/internal/store"
)

// The engine's operations, what the service's HTTP handlers call: each
// finds the endpoint (and delivery) it works on in the store named and,
// for a change, returns only once what it changed is written. A change
// refused, or one whose write failed, returns an error wrapping
// store.ErrUnavailable; the caller answers 503.

var (
	ErrNoEndpoint  = errors.New("no webhook endpoint with that id in this store")
	ErrNoDelivery  = errors.New("no delivery with that id for this endpoint")
	ErrBadCursor   = errors.New("is not a cursor this endpoint returned")
	ErrEndpointCap = errors.New("this store already has 5 webhook endpoints, the most allowed; delete one first")
	// ErrOverBudget: the change would take the store past a budget;
	// nothing was made.
	ErrOverBudget = errors.New("this store's undelivered webhooks, or its remembered Idempotency-Keys, are over their memory budget")
	// ErrUnwritable: the store refuses changes now.
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

// Writable returns ErrUnwritable while the store refuses changes, and
// nil otherwise: every change refuses so, and a caller may before it
// reads the request's body.
func (hk *Hooks) Writable() error {
	if hk.Failing() != nil {
		return ErrUnwritable
	}
	return nil
}

// endpointFor is the endpoint id of the store, for a change: looked up
// before the refusal, so that an unknown one is ErrNoEndpoint whatever
// the store's state.
func (hk *Hooks) endpointFor(ctx context.Context, storeID, id string, change bool) (*Endpoint, error) {
	if !change && hk.ReadFailing() != nil {
		return nil, ErrUnreadable
	}
	_, e, err := hk.rec().endpoint(ctx, storeID, id)
	if err == nil && change {
		err = hk.Writable()
	}
	return e, err
}

// CreateEndpoint makes an endpoint of the store with c, enabled unless c
// says otherwise, and returns it as the API shows it, with its secret.
// ErrEndpointCap when the store has MaxEndpointsPerStore already.
func (hk *Hooks) CreateEndpoint(ctx context.Context, storeID string, c EndpointChange) (map[string]any, error) {
	if err := hk.Writable(); err != nil {
		return nil, err
	}
	made := time.Now()
	e := &Endpoint{ID: NewID("we_"), StoreID: storeID, Enabled: true, CreatedAt: made.Unix(), CreatedNS: made.UnixNano(), Secret: signature.NewSecret()}
	c.apply(e, made.Unix())
	if err := hk.rec().createEndpoint(ctx, e); err != nil {
		return nil, err
	}
	return e.viewWithSecret(), nil
}

// StoreEndpoints returns the store's endpoints in the order they were
// made, as the API shows them (no secret).
func (hk *Hooks) StoreEndpoints(ctx context.Context, storeID string) ([]map[string]any, error) {
	if hk.ReadFailing() != nil {
		return nil, ErrUnreadable
	}
	eps, err := hk.rec().storeEndpoints(ctx, storeID)
	if err != nil {
		return nil, err
	}
	list := make([]map[string]any, len(eps))
	for i, e := range eps {
		list[i] = e.view()
	}
	return list, nil
}

// Endpoint returns the endpoint id of the store as the API shows it.
func (hk *Hooks) Endpoint(ctx context.Context, storeID, id string) (map[string]any, error) {
	e, err := hk.endpointFor(ctx, storeID, id, false)
	if err != nil {
		return nil, err
	}
	return e.view(), nil
}

// Secret returns the signing secret of the endpoint id of the store.
func (hk *Hooks) Secret(ctx context.Context, storeID, id string) (string, error) {
	e, err := hk.endpointFor(ctx, storeID, id, false)
	if err != nil {
		return "", err
	}
	return e.Secret, nil
}

// ChangeEndpoint sets on the endpoint id of the store what c gives, and
// returns it as the API shows it. Disabling it fails what is queued for
// it; dropping event types fails what is queued of those (failQueued),
// before the answer.
func (hk *Hooks) ChangeEndpoint(ctx context.Context, storeID, id string, c EndpointChange) (map[string]any, error) {
	var disabled bool
	e, err := hk.rec().changeEndpoint(ctx, storeID, id, func(e *Endpoint) error {
		if err := hk.Writable(); err != nil {
			return err
		}
		was := e.Enabled
		c.apply(e, time.Now().Unix())
		disabled = was && !e.Enabled
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The change is made: its queue is failed whole, a client gone or a
	// deadline passed meanwhile or not.
	fctx, cancel := sweeping(ctx)
	defer cancel()
	switch {
	case disabled:
		_, err = hk.rec().failQueued(fctx, e, func(*Delivery) bool { return true })
	case c.Events != nil:
		_, err = hk.rec().failQueued(fctx, e, func(d *Delivery) bool { return e.refusal(d) != "" })
	}
	if err != nil {
		return nil, err
	}
	return e.view(), nil
}

// sweepTimeout bounds work over an endpoint's whole log or queue (recover,
// a delete, failing its queue once a change is made): on a store of its
// own that answers, however far, it is not cut off at the request's
// deadline, which a stalled one still meets at its first call.
const sweepTimeout = 30 * time.Second

// sweeping is ctx for such work: detached from the request's deadline,
// bounded by sweepTimeout.
func sweeping(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
}

// DeleteEndpoint deletes the endpoint id of the store, its log and what
// is queued for it, and gives back what its pending deliveries held.
func (hk *Hooks) DeleteEndpoint(ctx context.Context, storeID, id string) error {
	if _, err := hk.endpointFor(ctx, storeID, id, true); err != nil {
		return err
	}
	ctx, cancel := sweeping(ctx)
	defer cancel()
	pending, err := hk.rec().deleteEndpoint(ctx, storeID, id)
	if s := hk.send; s != nil {
		s.abandon(id)
	}
	size := 0
	for _, d := range pending {
		size += len(d.Event.Body)
	}
	if rerr := hk.rec().release(ctx, storeID, len(pending), size); err == nil {
		err = rerr
	}
	return err
}

// RotateSecret gives the endpoint id of the store a new secret; the old
// one also signs for webhooks.secret_rotation_grace. It returns the
// endpoint as the API shows it, with the new secret.
func (hk *Hooks) RotateSecret(ctx context.Context, storeID, id string) (map[string]any, error) {
	e, err := hk.rec().changeEndpoint(ctx, storeID, id, func(e *Endpoint) error {
		if err := hk.Writable(); err != nil {
			return err
		}
		now := time.Now()
		e.OldSecret, e.OldSecretEnd = e.Secret, now.Add(hk.Cfg.Webhooks.SecretRotationGrace.D()).Unix()
		e.Secret = signature.NewSecret()
		e.UpdatedAt = now.Unix()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e.viewWithSecret(), nil
}

// testObject is the data.object of the test call's event.
const testObject = `{"id":"test","message":"This is a test event from the webhook settings."}`

// SendTest queues a webhook.test event for the endpoint id of the store
// alone: it goes once even if the endpoint is disabled.
func (hk *Hooks) SendTest(ctx context.Context, storeID, id string) (eventID, deliveryID string, err error) {
	e, err := hk.endpointFor(ctx, storeID, id, true)
	if err != nil {
		return "", "", err
	}
	ev := newEvent(EventTest, json.RawMessage(testObject), hk.Now())
	ds, err := hk.again(ctx, e, []*Event{ev})
	if err != nil {
		return "", "", err
	}
	return ev.ID, ds[0].ID, nil
}

// again queues evs for e now, as new deliveries asked for explicitly (the
// test call, a retry, recover): each goes once even if e is disabled or
// no longer takes its type, and is retried while e is enabled. It makes
// all of them, in one Apply, or past the store's budget none.
func (hk *Hooks) again(ctx context.Context, e *Endpoint, evs []*Event) ([]*Delivery, error) {
	r := hk.rec()
	size := 0
	for _, ev := range evs {
		size += len(ev.Body)
	}
	if err := r.reserve(ctx, e.StoreID, len(evs), size, hk.Budget.Pending); err != nil {
		return nil, err
	}
	now := hk.Now()
	var ws []store.Write
	ds := make([]*Delivery, len(evs))
	for i, ev := range evs {
		d := newDelivery(e.StoreID, e.ID, ev, now)
		d.NextAt += int64(i) * int64(time.Microsecond) // one after the other in the log, in the order asked
		d.LoggedAt += int64(i)
		d.Explicit, d.WhileDisabled = true, !e.Enabled
		ws, ds[i] = append(ws, enqueueRecord(d, now)...), d
	}
	if err := r.st.Apply(ctx, ws); err != nil {
		r.release(context.WithoutCancel(ctx), e.StoreID, len(evs), size) // not answered 2xx: given back
		return nil, err
	}
	hk.Poke()
	return ds, nil
}

// Publish makes an event of typ for the store and queues it for every
// enabled endpoint subscribed to typ. A key seen in the last 24 hours
// returns that event's id and sends nothing.
func (hk *Hooks) Publish(ctx context.Context, storeID, typ string, object json.RawMessage, key string) (string, error) {
	if err := hk.Writable(); err != nil {
		return "", err
	}
	id, err := hk.rec().publish(ctx, storeID, typ, object, key)
	if err == nil {
		hk.Poke()
	}
	return id, err
}

// Retry queues the event of the delivery dlvID of the endpoint id again,
// as a new delivery (again), and returns that as the log lists it.
func (hk *Hooks) Retry(ctx context.Context, storeID, id, dlvID string) (map[string]any, error) {
	e, err := hk.endpointFor(ctx, storeID, id, true)
	if err != nil {
		return nil, err
	}
	old, err := hk.deliveryOf(ctx, e, dlvID)
	if err != nil {
		return nil, err
	}
	ds, err := hk.again(ctx, e, []*Event{old.Event})
	if err != nil {
		return nil, err
	}
	return ds[0].summary(), nil
}

// deliveryOf returns e's delivery id, or ErrNoDelivery.
func (hk *Hooks) deliveryOf(ctx context.Context, e *Endpoint, id string) (*Delivery, error) {
	_, d, err := readRecord[Delivery](ctx, hk.St, hookKey(kindDelivery, id))
	if errors.Is(err, store.ErrNotFound) || err == nil && (d.EndpointID != e.ID || d.Event == nil) {
		return nil, ErrNoDelivery
	}
	return d, err
}

// Recover queues again, now, the event of every failed delivery of the
// endpoint id whose event was created at or after since (recoverable),
// and returns how many it queued: all of them, or past the store's
// budget none.
func (hk *Hooks) Recover(ctx context.Context, storeID, id string, since time.Time) (int, error) {
	e, err := hk.endpointFor(ctx, storeID, id, true)
	if err != nil {
		return 0, err
	}
	wctx, cancel := sweeping(ctx)
	defer cancel()
	evs, err := hk.rec().recoverable(wctx, e, since)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	if _, err := hk.again(ctx, e, evs); err != nil {
		return 0, err
	}
	return len(evs), nil
}

// Delivery returns the delivery dlvID of the endpoint id with every
// attempt, as the API shows it.
func (hk *Hooks) Delivery(ctx context.Context, storeID, id, dlvID string) (map[string]any, error) {
	e, err := hk.endpointFor(ctx, storeID, id, false)
	if err != nil {
		return nil, err
	}
	d, err := hk.deliveryOf(ctx, e, dlvID)
	if err != nil {
		return nil, err
	}
	return d.detail(e), nil
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
func (hk *Hooks) Deliveries(ctx context.Context, storeID, id string, q DeliveryQuery) ([]map[string]any, string, error) {
	e, err := hk.endpointFor(ctx, storeID, id, false)
	if err != nil {
		return nil, "", err
	}
	ds, next, err := hk.rec().logPage(ctx, e, q)
	if err != nil {
		return nil, "", err
	}
	page := make([]map[string]any, len(ds))
	for i, d := range ds {
		page[i] = d.summary()
	}
	return page, next, nil
}

// Counts is how many deliveries succeeded, failed, and are pending.
type Counts struct{ Succeeded, Failed, Pending int }

// LastDay counts the deliveries of the endpoint id made in each of the
// 24 hours before end, oldest hour first, by their status.
func (hk *Hooks) LastDay(ctx context.Context, storeID, id string, end time.Time) ([24]Counts, error) {
	e, err := hk.endpointFor(ctx, storeID, id, false)
	if err != nil {
		return [24]Counts{}, err
	}
	return hk.rec().lastDay(ctx, e, end)
}
