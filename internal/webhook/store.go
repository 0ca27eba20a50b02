package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"deeplink/internal/store"
)

// Records of the webhook state, as JSON (but deliveries:
// deliveryrecord.go), under hooks:<kind>:<id>. Builds before the state of
// record also listed each kind's ids in the sorted set hooks:index:<kind>,
// and kept events in records of their own (upgrade.go reads those).
const (
	kindEndpoint = "ep"
	kindEvent    = "evt"
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
// record's NextAt) rather than when the lease ends (Open's, on a store
// whose claims are all a dead process's): so that a crash does not cost
// the next start its places for a lease's length.
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
				switch _, d, err := readRecord[Delivery](ctx, hk.St, hookKey(kindDelivery, m.Member)); {
				case errors.Is(err, store.ErrNotFound):
				case err != nil:
					return err
				case d.Status == StatusPending && claimed(d, m.Score):
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
