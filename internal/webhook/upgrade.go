package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/store"
)

// The state of record (records.go) keeps the records of the builds
// before it under the same keys (hooks:ep:<id>, hooks:dlv:<id>,
// hooks:idem:<key>) and adds what they did not have: each store's list
// of endpoints, each endpoint's places and log, the queue, and the event
// in each delivery's record. upgradeRecords makes those from what an
// earlier build wrote (its indexes, hooks:index:<kind>, and its event
// records), once, and marks the store done (versionKey). The earlier
// build's indexes and event records are left as they were; what the new
// build makes is in none of them, so a rollback finds the state as it
// was at the upgrade.
const (
	versionKey   = "hooks:version"
	version      = "2"
	upgradingKey = "hooks:upgrading" // held by the process upgrading, expiring
	upgradeHold  = time.Minute
)

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

// upgradeRecords upgrades the webhook state in st, if an earlier build
// wrote it and no process has upgraded it yet; with several processes
// starting at once, one does it and the others wait for it. Endpoints of
// stores cfg has are filed under the store's id as cfg spells it.
func upgradeRecords(ctx context.Context, st store.Store, cfg *config.Config) (upgraded bool, err error) {
	for {
		v, err := st.Get(ctx, versionKey)
		if err == nil && string(v) == version {
			return false, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
		if earlier, err := earlierState(ctx, st); err != nil || !earlier {
			return false, err // a store no earlier build wrote: nothing to do, nothing written
		}
		switch err := st.Insert(ctx, upgradingKey, []byte{1}, time.Now().Add(upgradeHold)); {
		case errors.Is(err, store.ErrExists):
			select { // another process upgrades: its mark comes, or its hold runs out
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case err != nil:
			return false, err
		}
		err = upgrade(ctx, st, cfg)
		if err == nil {
			err = st.Put(ctx, versionKey, []byte(version), time.Time{})
		}
		st.Delete(ctx, upgradingKey)
		return err == nil, err
	}
}

// earlierState reports whether an earlier build wrote endpoints or
// deliveries to st: whether it lists any in its indexes.
func earlierState(ctx context.Context, st store.Store) (bool, error) {
	for _, kind := range []string{kindEndpoint, kindDelivery} {
		ms, err := st.ZRange(ctx, hookIndex(kind), math.MinInt64, math.MaxInt64, 1, false)
		if err != nil || len(ms) > 0 {
			return len(ms) > 0, err
		}
	}
	return false, nil
}

// upgrade writes the upgrade's records: every write is the same however
// often it is made, so that an upgrade cut short is made again whole.
func upgrade(ctx context.Context, st store.Store, cfg *config.Config) error {
	index := func(kind string) ([]store.Scored, error) {
		return st.ZRange(ctx, hookIndex(kind), math.MinInt64, math.MaxInt64, 0, false)
	}
	eps, err := index(kindEndpoint)
	if err != nil {
		return err
	}
	byStore := map[string][]*Endpoint{}
	storeOf := map[string]string{} // endpoint id → its store's
	var ws []store.Write
	for _, m := range eps {
		_, e, err := endpointMemo.read(ctx, st, hookKey(kindEndpoint, m.Member))
		if errors.Is(err, store.ErrNotFound) {
			continue // its write cut short
		}
		if err != nil {
			return err
		}
		if sc := cfg.Store(e.StoreID); sc != nil && sc.ID != e.StoreID {
			e.StoreID = sc.ID // in its one spelling
			b, _ := marshalRecord(e)
			ws = append(ws, store.Write{Key: hookKey(kindEndpoint, e.ID), Val: b})
		}
		byStore[e.StoreID] = append(byStore[e.StoreID], e)
		storeOf[e.ID] = e.StoreID
		ws = append(ws, placesWrites(e.ID)...)
	}
	for id, list := range byStore {
		slices.SortFunc(list, func(a, b *Endpoint) int {
			return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.CreatedNS, b.CreatedNS), cmp.Compare(a.ID, b.ID))
		})
		ids := make([]string, len(list))
		for i, e := range list {
			ids[i] = e.ID
		}
		b, _ := marshalRecord(ids) // strings always encode
		ws = append(ws, store.Write{Key: listKey + id, Val: b})
	}
	if err := st.Apply(ctx, ws); err != nil {
		return err
	}

	dls, err := index(kindDelivery)
	if err != nil {
		return err
	}
	events := map[string]*Event{}
	ws = ws[:0]
	logBytes := map[string]int64{} // endpoint id → what its finished deliveries hold
	pending := map[string]int64{}  // store id → what its pending deliveries hold
	for _, m := range dls {
		_, d, err := readRecord[Delivery](ctx, st, hookKey(kindDelivery, m.Member))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if d.Event == nil {
			if _, ok := events[d.EventID]; !ok {
				_, events[d.EventID], err = readRecord[Event](ctx, st, hookKey(kindEvent, d.EventID))
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
			}
			if d.Event = events[d.EventID]; d.Event == nil {
				continue // an earlier build dropped it too
			}
		}
		// The log's order: by when it was made, and within one second
		// by the endpoint's sequence, as the earlier build ordered it.
		d.LoggedAt = d.CreatedAt*1e6 + int64(d.Seq%1e6) // microseconds, as the log's scores
		d.StoreID = storeOf[d.EndpointID]
		w := enqueueRecord(d, time.Unix(0, d.NextAt)) // its record, its place in the log, and in the queue
		if d.Status == StatusPending {
			ws = append(ws, w...)
			pending[d.StoreID] += NewCost(len(d.Event.Body))
		} else {
			logBytes[d.EndpointID] += logCost(len(w[0].Val))
			ws = append(ws, w[0], w[1], store.Write{Key: doneKey + d.EndpointID, Member: d.ID, Val: member, Score: d.LoggedAt})
		}
		if len(ws) >= 1000 { // one Apply a thousand writes: a journal batch of a sensible size
			if err := st.Apply(ctx, ws); err != nil {
				return err
			}
			ws = ws[:0]
			// The hold is renewed as the upgrade goes on: another process
			// waits for it however long it takes.
			if err := st.Extend(ctx, upgradingKey, time.Now().Add(upgradeHold)); err != nil {
				return err
			}
		}
	}
	for id, n := range logBytes {
		ws = append(ws, store.Write{Key: logBytesKey + id, Val: []byte(strconv.FormatInt(n, 10))})
	}
	for id, n := range pending {
		ws = append(ws, store.Write{Key: pendingKey + id, Val: []byte(strconv.FormatInt(n, 10))})
	}
	if err := st.Apply(ctx, ws); err != nil {
		return err
	}
	// Each endpoint listed as due by its earliest pending delivery (the
	// writes above listed it by each in turn).
	q := &queue{st: st}
	for _, m := range eps {
		if err := q.refresh(ctx, m.Member); err != nil {
			return err
		}
	}
	return nil
}

// ForgetHolds removes the upgrade's hold from st, a store no other
// process uses (the edge host's embedded one): a process that died
// holding it would otherwise keep the next start waiting until it
// expires.
func ForgetHolds(ctx context.Context, st store.Store) error {
	return st.Delete(ctx, upgradingKey)
}
