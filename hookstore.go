package main

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
	kindEndpoint = "ep"
	kindEvent    = "evt"
	kindDelivery = "dlv"
	kindIdem     = "idem"
)

var hookKinds = []string{kindEndpoint, kindEvent, kindDelivery, kindIdem}

func hookKey(kind, id string) string { return "hooks:" + kind + ":" + id }
func hookIndex(kind string) string   { return "hooks:index:" + kind }

// touchLocked notes that the thing of kind and id changed, was made or
// was removed: the next persist writes it as it then is. hk.mu must be
// held.
func (hk *hooks) touchLocked(kind, id string) {
	if hk.touched == nil {
		hk.touched = map[string]bool{}
	}
	hk.touched[kind+":"+id] = true
	hk.touchGen++
}

// hookOp is one write of persist: val nil deletes.
type hookOp struct {
	kind, id string
	val      []byte
	exp      time.Time
}

// opLocked is the write that brings the store to what kind and id are in
// memory now. hk.mu must be held.
func (hk *hooks) opLocked(kind, id string) (hookOp, error) {
	op := hookOp{kind: kind, id: id}
	var v any
	switch kind {
	case kindEndpoint:
		if e := hk.endpoints[id]; e != nil {
			v, e.written = e, e.Enabled
		}
	case kindEvent:
		if ev := hk.events[id]; ev != nil {
			v = ev
		}
	case kindDelivery:
		if d := hk.deliv[id]; d != nil {
			v = d
		}
	case kindIdem:
		if m, ok := hk.idem[id]; ok {
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
// nil. hk.mu must be held.
func (hk *hooks) parkedLocked(kind, id string) any {
	switch kind {
	case kindEndpoint:
		for _, e := range hk.parked.Endpoints {
			if e.ID == id {
				return e
			}
		}
	case kindEvent:
		for _, ev := range hk.parked.Events {
			if ev.ID == id {
				return ev
			}
		}
	case kindDelivery:
		for _, d := range hk.parked.Deliveries {
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
func (hk *hooks) persist(ctx context.Context) error {
	if hk.st == nil {
		return nil
	}
	hk.mu.Lock()
	want := hk.touchGen // what the caller changed is touched by now
	hk.mu.Unlock()
	hk.persistMu.Lock()
	defer hk.persistMu.Unlock()
	if hk.persistedGen >= want {
		return nil // a persist that ran meanwhile wrote it (and perhaps more)
	}
	hk.mu.Lock()
	cover := hk.touchGen
	ops := make([]hookOp, 0, len(hk.touched))
	var err error
	for k := range hk.touched {
		kind, id, _ := strings.Cut(k, ":")
		op, oerr := hk.opLocked(kind, id)
		err = errors.Join(err, oerr)
		ops = append(ops, op)
	}
	clear(hk.touched)
	hk.mu.Unlock()
	if err == nil {
		err = hk.write(ctx, ops)
	}
	if err != nil {
		hk.mu.Lock()
		for _, op := range ops {
			hk.touchLocked(op.kind, op.id)
		}
		hk.mu.Unlock()
		hk.persistBad.Store(true)
		return fmt.Errorf("webhooks: %w", err)
	}
	hk.persistedGen = cover
	hk.persistBad.Store(false)
	return nil
}

// write makes ops' writes and their index entries in one Apply, so that
// they share the store's write. A crash in between may leave an entry
// without a record, which a start skips, or a record without an entry,
// one nothing acknowledged. hk.persistMu must be held, or nothing run yet.
func (hk *hooks) write(ctx context.Context, ops []hookOp) error {
	ws := make([]store.Write, 0, 2*len(ops))
	for _, op := range ops {
		ws = append(ws, store.Write{Key: hookKey(op.kind, op.id), Val: op.val, Exp: op.exp})
		if hk.indexed[op.kind+":"+op.id] != (op.val != nil) {
			ws = append(ws, store.Write{Key: hookIndex(op.kind), Member: op.id, Val: op.val})
		}
	}
	var gen int64
	if hk.share != nil && len(ops) > 0 {
		// Listed in the change feed after the records, so that a replica
		// that reads the entry finds them written (hookshare.go).
		var err error
		if gen, err = hk.st.Add(ctx, shareGen, 1, time.Time{}); err != nil {
			return err
		}
		ws = append(ws, store.Write{Key: shareFeed, Member: feedMember(gen, ops), Val: []byte{1}, Score: gen})
	}
	if err := hk.st.Apply(ctx, ws); err != nil {
		return err
	}
	for _, op := range ops {
		hk.index(op.kind, op.id, op.val != nil)
	}
	if hk.share != nil {
		// Written under the lock, by its one writer, on the copy caught
		// up when the lock was taken: nothing between is another's.
		hk.share.seen = max(hk.share.seen, gen)
	}
	return nil
}

// index notes whether the index of kind lists id. Only persist and
// loadStore call it, one at a time.
func (hk *hooks) index(kind, id string, listed bool) {
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
func (hk *hooks) loadStore(ctx context.Context) error {
	var f hooksFile
	for _, kind := range hookKinds {
		ids, err := hk.st.ZRange(ctx, hookIndex(kind), math.MinInt64, math.MaxInt64, 0, false)
		if err != nil {
			return err
		}
		for _, m := range ids {
			hk.index(kind, m.Member, true)
			b, err := hk.st.Get(ctx, hookKey(kind, m.Member))
			if errors.Is(err, store.ErrNotFound) {
				continue // expired (an Idempotency-Key), or its write cut short
			}
			if err != nil {
				return err
			}
			if err := f.add(kind, m.Member, b); err != nil {
				return fmt.Errorf("webhook state: %s %s: %w", kind, m.Member, err)
			}
		}
	}
	hk.restore(f)
	return nil
}

// add decodes b, the record of kind and id, into f.
func (f *hooksFile) add(kind, id string, b []byte) error {
	switch kind {
	case kindEndpoint:
		var e endpoint
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		f.Endpoints = append(f.Endpoints, &e)
	case kindEvent:
		var ev event
		if err := json.Unmarshal(b, &ev); err != nil {
			return err
		}
		f.Events = append(f.Events, &ev)
	case kindDelivery:
		var d delivery
		if err := json.Unmarshal(b, &d); err != nil {
			return err
		}
		f.Deliveries = append(f.Deliveries, &d)
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

// importHooksFile writes the webhook state an earlier build saved as
// data_dir/webhooks.json into the store, and then moves the file into
// data_dir/earlier-build/; loadStore reads it from there on.
func (hk *hooks) importHooksFile(ctx context.Context, dir string) error {
	path := filepath.Join(dir, hooksFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	f, err := decodeHooksFile(b)
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
		add(kindEndpoint, e.ID, e, time.Time{})
	}
	for _, ev := range f.Events {
		add(kindEvent, ev.ID, ev, time.Time{})
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
	moved := filepath.Join(dir, legacyMovedDir)
	if err := os.MkdirAll(moved, 0o700); err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(moved, hooksFileName))
}

// hooksFileName is where builds before the store contract kept the whole
// webhook state, one JSON file (its form: hooksfile.go); importHooksFile
// reads it once.
const hooksFileName = "webhooks.json"

// hooksFile is the whole webhook state: the form of webhooks.json, and
// what a start gathers from the store before restore.
type hooksFile struct {
	Endpoints   []*endpoint     `json:"endpoints"`
	Events      []*event        `json:"events"`
	Deliveries  []*delivery     `json:"deliveries"`
	Idempotency map[string]idem `json:"idempotency"`
}

// restore takes f, the saved webhook state, as the working copy.
// Pending deliveries are scheduled again at their saved time (at once
// when that has passed).
func (hk *hooks) restore(f hooksFile) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	parked := map[string]bool{} // endpoint ids
	for _, e := range f.Endpoints {
		if st := hk.cfg.Store(e.StoreID); st != nil {
			e.StoreID = st.ID // in its one spelling
		} else {
			slog.Warn("webhooks: keeping, inactive, the endpoint of a store no longer configured; it is served again if the store is", "endpoint", e.ID, "store", e.StoreID)
			hk.parked.Endpoints = append(hk.parked.Endpoints, e)
			parked[e.ID] = true
			continue
		}
		e.written = e.Enabled
		hk.addEndpointLocked(e)
	}
	events := make(map[string]*event, len(f.Events))
	for _, ev := range f.Events {
		events[ev.ID] = ev
	}
	parkedEvents := map[string]bool{}
	for _, d := range f.Deliveries {
		e := hk.endpoints[d.EndpointID]
		d.ev = events[d.EventID]
		if parked[d.EndpointID] && d.ev != nil {
			hk.parked.Deliveries = append(hk.parked.Deliveries, d)
			if !parkedEvents[d.EventID] {
				parkedEvents[d.EventID] = true
				hk.parked.Events = append(hk.parked.Events, d.ev)
			}
			continue
		}
		if e == nil || d.ev == nil {
			continue
		}
		d.index = -1
		hk.referLocked(d) // only events some delivery refers to are kept
		e.log = append(e.log, d)
		if d.Status == statusPending {
			hk.pending[e.StoreID] += logCost(d)
			hk.scheduleLocked(d)
		} else {
			e.finished++
			e.logBytes += logCost(d)
		}
	}
	for _, e := range hk.endpoints {
		// The store lists records by id, not in the order they were made,
		// and the log is oldest first: listing, its cursors and trimming
		// read it so.
		slices.SortFunc(e.log, func(a, b *delivery) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	if f.Idempotency != nil {
		hk.idem = make(map[string]idem, len(f.Idempotency))
		for k, v := range f.Idempotency {
			store, key, _ := strings.Cut(k, "\x00")
			if st := hk.cfg.Store(store); st != nil { // in its one spelling
				store, k = st.ID, st.ID+"\x00"+key
			}
			hk.idem[k] = v
			hk.idemCount[store]++
			hk.idemQueue = append(hk.idemQueue, idemEntry{k, v.Expires})
		}
		slices.SortFunc(hk.idemQueue, func(a, b idemEntry) int { return cmp.Compare(a.expires, b.expires) })
	}
}
