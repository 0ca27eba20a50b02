package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"deeplink/internal/store"
)

// Records of the webhook state, as JSON (but deliveries:
// deliveryrecord.go), under hooks:<kind>:<id>. Builds before the state of
// record also listed each kind's ids in the sorted set hooks:index:<kind>,
// and kept events in records of their own (upgrade.go reads those).
const (
	KindEndpoint = "ep"
	KindEvent    = "evt"
	kindDelivery = "dlv"
	kindIdem     = "idem"
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

// Open makes the state in hk.St one this build serves: it upgrades what
// an earlier build wrote (upgradeRecords), once, saying so; and when the
// store is this process's alone (Alone), it frees every claim in the
// queue, all a dead process's (forgetClaims).
func (hk *Hooks) Open(ctx context.Context) error {
	upgraded, err := upgradeRecords(ctx, hk.St, hk.Cfg)
	if err != nil {
		return fmt.Errorf("webhooks: upgrading the state an earlier build wrote: %w", err)
	}
	if upgraded {
		hk.Log.Info("webhooks: upgraded the state an earlier build wrote; a rollback needs a copy of the state from before this start")
	}
	if hk.Alone {
		if err := hk.forgetClaims(ctx); err != nil {
			return fmt.Errorf("webhooks: freeing the claims of the process before: %w", err)
		}
	}
	return nil
}

// forgetClaims frees the places of every endpoint of the stores
// configured, and makes each delivery claimed due at its own time (its
// record's NextAt) rather than when the claim's lease ends: for a start
// on a store no other process uses, where every claim is a dead
// process's, so that a crash does not cost the next start its places
// for a lease's length.
func (hk *Hooks) forgetClaims(ctx context.Context) error {
	now := hk.Now().UnixMilli()
	q := &queue{st: hk.St}
	for _, sc := range hk.Cfg.Stores {
		_, ids, err := hk.rec().endpointIDs(ctx, sc.ID)
		if err != nil {
			return err
		}
		for _, ep := range ids {
			ws := placesWrites(ep) // all free
			later, err := hk.St.ZRange(ctx, queueDue+ep, now+1, math.MaxInt64, 0, false)
			if err != nil {
				return err
			}
			for _, m := range later {
				_, d, err := readRecord[Delivery](ctx, hk.St, hookKey(kindDelivery, m.Member))
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if d.Status == StatusPending && claimed(d, m.Score) {
					ws = append(ws, store.Write{Key: queueDue + ep, Member: m.Member, Val: member, Score: time.Unix(0, d.NextAt).UnixMilli()})
				}
			}
			if err := hk.St.Apply(ctx, ws); err != nil {
				return err
			}
			if err := q.refresh(ctx, ep); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImportHooksFile writes the webhook state an earlier build saved as
// webhooks.json in dir into the store, as the builds after it kept it
// (records and their indexes: Open upgrades them), and then moves the
// file into the directory moved (made if need be).
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
	var ws []store.Write
	add := func(kind, id string, v any, exp time.Time) {
		b, merr := marshalRecord(v)
		err = errors.Join(err, merr)
		ws = append(ws, store.Write{Key: hookKey(kind, id), Val: b, Exp: exp},
			store.Write{Key: hookIndex(kind), Member: id, Val: []byte{1}})
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
		err = hk.St.Apply(ctx, ws) // the same records again, should a start cut this short
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	if err := os.MkdirAll(moved, 0o700); err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(moved, HooksFileName))
}

// HooksFileName is where builds before the store contract kept the whole
// webhook state, one JSON file (its form: hooksfile.go); ImportHooksFile
// reads it once.
const HooksFileName = "webhooks.json"

// HooksFile is the whole webhook state as webhooks.json holds it.
type HooksFile struct {
	Endpoints   []*Endpoint     `json:"endpoints"`
	Events      []*Event        `json:"events"`
	Deliveries  []*Delivery     `json:"deliveries"`
	Idempotency map[string]idem `json:"idempotency"`
}
