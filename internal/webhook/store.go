package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The webhook state is kept in the store one record per thing, as JSON:
// each endpoint, event, delivery (with its attempts) and Idempotency-Key
// under hooks:<kind>:<id>, and each kind's ids in the sorted set
// hooks:index:<kind>, which a start reads them back by. The maps of hooks
// stay the working copy; what a change touched is written through before
// the change is answered (persist).
const (
	KindEndpoint = "ep"
	KindEvent    = "evt"
	kindDelivery = "dlv"
	kindIdem     = "idem"
)

var hookKinds = []string{KindEndpoint, KindEvent, kindDelivery, kindIdem}

func HookKey(kind, id string) string { return "hooks:" + kind + ":" + id }
func HookIndex(kind string) string   { return "hooks:index:" + kind }

// touchLocked notes that the thing of kind and id changed, was made or
// was removed: the next persist writes it as it then is. hk.Mu must be
// held.
func (hk *Hooks) TouchLocked(kind, id string) {
	if hk.Touched == nil {
		hk.Touched = map[string]bool{}
	}
	hk.Touched[kind+":"+id] = true
	hk.touchGen++
}

// hookOp is one write of persist: val nil deletes.
type hookOp struct {
	kind, id string
	val      []byte
	exp      time.Time
}

// opLocked is the write that brings the store to what kind and id are in
// memory now. hk.Mu must be held.
func (hk *Hooks) opLocked(kind, id string) (hookOp, error) {
	op := hookOp{kind: kind, id: id}
	var v any
	switch kind {
	case KindEndpoint:
		if e := hk.Endpoints[id]; e != nil {
			v, e.written = e, e.Enabled
		}
	case KindEvent:
		if ev := hk.Events[id]; ev != nil {
			v = ev
		}
	case kindDelivery:
		if d := hk.Deliv[id]; d != nil {
			v = d
		}
	case kindIdem:
		if m, ok := hk.Idem[id]; ok {
			v, op.exp = m, time.Unix(m.Expires, 0)
		}
	}
	if v == nil {
		v = hk.parkedLocked(kind, id)
	}
	if v == nil {
		return op, nil
	}
	b, err := marshalRecord(v)
	op.val = b
	return op, err
}

// marshalRecord encodes v as JSON without escaping HTML: an event's body
// is kept byte for byte as it is sent ("<" stays "<").
func marshalRecord(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// parkedLocked returns the parked endpoint, event or delivery of id, or
// nil. hk.Mu must be held.
func (hk *Hooks) parkedLocked(kind, id string) any {
	switch kind {
	case KindEndpoint:
		for _, e := range hk.Parked.Endpoints {
			if e.ID == id {
				return e
			}
		}
	case KindEvent:
		for _, ev := range hk.Parked.Events {
			if ev.ID == id {
				return ev
			}
		}
	case kindDelivery:
		for _, d := range hk.Parked.Deliveries {
			if d.ID == id {
				return d
			}
		}
	}
	return nil
}

// persist writes what was touched before it was called to the store, and
// returns once it is as durable as the store makes an acknowledgement.
// One persist runs at a time, so a record is never overwritten by an
// older form of itself; one that finds its caller's changes written by a
// persist that ran while it waited returns at once, so concurrent changes
// share their writes. On failure what it took stays touched, for the
// next persist.
func (hk *Hooks) Persist(ctx context.Context) error {
	if hk.St == nil {
		return nil
	}
	hk.Mu.Lock()
	want := hk.touchGen // what the caller changed is touched by now
	hk.Mu.Unlock()
	hk.persistMu.Lock()
	defer hk.persistMu.Unlock()
	if hk.persistedGen >= want {
		return nil // a persist that ran meanwhile wrote it (and perhaps more)
	}
	hk.Mu.Lock()
	cover := hk.touchGen
	ops := make([]hookOp, 0, len(hk.Touched))
	var err error
	for k := range hk.Touched {
		kind, id, _ := strings.Cut(k, ":")
		op, oerr := hk.opLocked(kind, id)
		err = errors.Join(err, oerr)
		ops = append(ops, op)
	}
	clear(hk.Touched)
	hk.Mu.Unlock()
	if err == nil {
		err = hk.write(ctx, ops)
	}
	if err != nil {
		hk.Mu.Lock()
		for _, op := range ops {
			hk.TouchLocked(op.kind, op.id)
		}
		hk.Mu.Unlock()
		hk.PersistBad.Store(true)
		return fmt.Errorf("webhooks: %w", err)
	}
	hk.persistedGen = cover
	hk.PersistBad.Store(false)
	return nil
}

// write makes ops' writes and their index entries in one Apply, so that
// they share the store's write. A crash in between may leave an entry
// without a record, which a start skips, or a record without an entry,
// one nothing acknowledged. hk.persistMu must be held, or nothing run yet.
func (hk *Hooks) write(ctx context.Context, ops []hookOp) error {
	ws := make([]store.Write, 0, 2*len(ops))
	for _, op := range ops {
		ws = append(ws, store.Write{Key: HookKey(op.kind, op.id), Val: op.val, Exp: op.exp})
		if hk.indexed[op.kind+":"+op.id] != (op.val != nil) {
			ws = append(ws, store.Write{Key: HookIndex(op.kind), Member: op.id, Val: op.val})
		}
	}
	var gen int64
	if hk.Share != nil && len(ops) > 0 {
		// Listed in the change feed after the records, so that a replica
		// that reads the entry finds them written (share.go).
		var err error
		if gen, err = hk.St.Add(ctx, ShareGen, 1, time.Time{}); err != nil {
			return err
		}
		ws = append(ws, store.Write{Key: ShareFeed, Member: feedMember(gen, ops), Val: []byte{1}, Score: gen})
	}
	if err := hk.St.Apply(ctx, ws); err != nil {
		return err
	}
	for _, op := range ops {
		hk.index(op.kind, op.id, op.val != nil)
	}
	if hk.Share != nil {
		// Written under the lock, by its one writer, on the copy caught
		// up when the lock was taken: nothing between is another's.
		hk.Share.seen = max(hk.Share.seen, gen)
	}
	return nil
}

// index notes whether the index of kind lists id. Only persist and
// loadStore call it, one at a time.
func (hk *Hooks) index(kind, id string, listed bool) {
	if hk.indexed == nil {
		hk.indexed = map[string]bool{}
	}
	if listed {
		hk.indexed[kind+":"+id] = true
	} else {
		delete(hk.indexed, kind+":"+id)
	}
}

// loadStore restores the webhook state kept in the store. Pending
// deliveries are scheduled again at their saved time (at once when that
// has passed).
func (hk *Hooks) LoadStore(ctx context.Context) error {
	var f HooksFile
	for _, kind := range hookKinds {
		ids, err := hk.St.ZRange(ctx, HookIndex(kind), math.MinInt64, math.MaxInt64, 0, false)
		if err != nil {
			return err
		}
		for _, m := range ids {
			hk.index(kind, m.Member, true)
			b, err := hk.St.Get(ctx, HookKey(kind, m.Member))
			if errors.Is(err, store.ErrNotFound) {
				// Expired (an Idempotency-Key), or its write cut short:
				// the next persist takes it out of the index too.
				hk.Mu.Lock()
				hk.TouchLocked(kind, m.Member)
				hk.Mu.Unlock()
				continue
			}
			if err != nil {
				return err
			}
			if err := f.Add(kind, m.Member, b); err != nil {
				return fmt.Errorf("webhook state: %s %s: %w", kind, m.Member, err)
			}
		}
	}
	hk.Restore(f)
	return nil
}

// add decodes b, the record of kind and id, into f.
func (f *HooksFile) Add(kind, id string, b []byte) error {
	switch kind {
	case KindEndpoint:
		return appendDecoded(&f.Endpoints, b)
	case KindEvent:
		return appendDecoded(&f.Events, b)
	case kindDelivery:
		return appendDecoded(&f.Deliveries, b)
	case kindIdem:
		var m idem
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		if f.Idempotency == nil {
			f.Idempotency = map[string]idem{}
		}
		f.Idempotency[id] = m
	}
	return nil
}

// appendDecoded decodes b and appends it to list.
func appendDecoded[T any](list *[]*T, b []byte) error {
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

// ImportHooksFile writes the webhook state an earlier build saved as
// webhooks.json in dir into the store, and then moves the file into the
// directory moved (made if need be); loadStore reads it from there on.
func (hk *Hooks) ImportHooksFile(ctx context.Context, dir, moved string) error {
	path := filepath.Join(dir, HooksFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	f, err := DecodeHooksFile(b)
	if err != nil {
		return fmt.Errorf("importing %s: %w (restore data_dir from a backup, or move the file away to start without webhooks)", path, err)
	}
	var ops []hookOp
	add := func(kind, id string, v any, exp time.Time) {
		b, merr := marshalRecord(v)
		err = errors.Join(err, merr)
		ops = append(ops, hookOp{kind: kind, id: id, val: b, exp: exp})
	}
	for _, e := range f.Endpoints {
		add(KindEndpoint, e.ID, e, time.Time{})
	}
	for _, ev := range f.Events {
		add(KindEvent, ev.ID, ev, time.Time{})
	}
	for _, d := range f.Deliveries {
		add(kindDelivery, d.ID, d, time.Time{})
	}
	for k, m := range f.Idempotency {
		add(kindIdem, k, m, time.Unix(m.Expires, 0))
	}
	if err == nil {
		err = hk.write(ctx, ops) // the same records again, should a start cut this short
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	if err := os.MkdirAll(moved, 0o700); err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(moved, HooksFileName))
}

// hooksFileName is where builds before the store contract kept the whole
// webhook state, one JSON file (its form: hooksfile.go); importHooksFile
// reads it once.
const HooksFileName = "webhooks.json"

// hooksFile is the whole webhook state: the form of webhooks.json, and
// what a start gathers from the store before restore.
type HooksFile struct {
	Endpoints   []*Endpoint     `json:"endpoints"`
	Events      []*Event        `json:"events"`
	Deliveries  []*Delivery     `json:"deliveries"`
	Idempotency map[string]idem `json:"idempotency"`
}

// restore takes f, the saved webhook state, as the working copy.
// Pending deliveries are scheduled again at their saved time (at once
// when that has passed).
func (hk *Hooks) Restore(f HooksFile) {
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	parked := map[string]bool{} // endpoint ids
	for _, e := range f.Endpoints {
		if st := hk.Cfg.Store(e.StoreID); st != nil {
			e.StoreID = st.ID // in its one spelling
		} else {
			slog.Warn("webhooks: keeping, inactive, the endpoint of a store no longer configured; it is served again if the store is", "endpoint", e.ID, "store", e.StoreID)
			hk.Parked.Endpoints = append(hk.Parked.Endpoints, e)
			parked[e.ID] = true
			continue
		}
		e.written = e.Enabled
		hk.AddEndpointLocked(e)
	}
	events := make(map[string]*Event, len(f.Events))
	for _, ev := range f.Events {
		events[ev.ID] = ev
	}
	parkedEvents := map[string]bool{}
	for _, d := range f.Deliveries {
		e := hk.Endpoints[d.EndpointID]
		d.Ev = events[d.EventID]
		if parked[d.EndpointID] && d.Ev != nil {
			hk.Parked.Deliveries = append(hk.Parked.Deliveries, d)
			if !parkedEvents[d.EventID] {
				parkedEvents[d.EventID] = true
				hk.Parked.Events = append(hk.Parked.Events, d.Ev)
			}
			continue
		}
		if e == nil || d.Ev == nil {
			continue
		}
		d.Index = -1
		hk.referLocked(d) // only events some delivery refers to are kept
		e.Log = append(e.Log, d)
		if d.Status == StatusPending {
			hk.Pending[e.StoreID] += LogCost(d)
			hk.scheduleLocked(d)
		} else {
			e.Finished++
			e.LogBytes += LogCost(d)
		}
	}
	for _, e := range hk.Endpoints {
		// The store lists records by id, not in the order they were made,
		// and the log is oldest first: listing, its cursors and trimming
		// read it so.
		slices.SortFunc(e.Log, func(a, b *Delivery) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	if f.Idempotency != nil {
		hk.Idem = make(map[string]idem, len(f.Idempotency))
		for k, v := range f.Idempotency {
			store, key, _ := strings.Cut(k, "\x00")
			if st := hk.Cfg.Store(store); st != nil { // in its one spelling
				store, k = st.ID, st.ID+"\x00"+key
			}
			hk.Idem[k] = v
			hk.IdemCount[store]++
			hk.IdemQueue = append(hk.IdemQueue, IdemEntry{k, v.Expires})
		}
		slices.SortFunc(hk.IdemQueue, func(a, b IdemEntry) int { return cmp.Compare(a.Expires, b.Expires) })
	}
}
