package webhook

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"deeplink/internal/store"
)

// The delivery queue kept in a store.Store, so that senders on any
// number of replicas share the sending, each claiming what it sends
// under a lease (as asynq and river do), with no lock shared by all:
//
//   - Each endpoint's pending deliveries sit in a sorted set of their due
//     times (queueDue + endpoint id, scored in unix milliseconds). A
//     claim moves a delivery's score to the end of its lease, so that no
//     other claims it meanwhile; one whose claimer died comes due again
//     when the lease ends, and another sends it.
//   - Each endpoint has PerEndpointInFlight places (queueSlots +
//     endpoint id, scored by when the lease of the attempt holding it
//     ends, 0 when free): a delivery is claimed only with a place, so
//     the in-flight limit holds across replicas. A place whose holder
//     died frees itself when the lease ends; the endpoint has fewer
//     places until then.
//   - The endpoints with something due are listed in queueReady, scored
//     by the earliest due time known, so that a sender looks only at
//     those: a slow endpoint's backlog never stands before another's
//     delivery. Claiming an endpoint there holds it for readyHold, so
//     that senders do not all look at one at once; and whoever
//     changes an endpoint's due set sets its entry again (refresh).
//   - A worker that ends an attempt keeps its place for the endpoint's
//     next due delivery (handOff), as long as there is one.
const (
	queueReady = "hooks:ready"
	queueDue   = "hooks:due:"
	queueSlots = "hooks:slots:"

	readyHold = time.Second
)

// queue is the delivery queue in st. Its methods take the time as now,
// so that its tests set it; a claim lasts lease.
type queue struct {
	st    store.Store
	lease time.Duration
}

// claim is a delivery claimed for an attempt, with the place it holds on
// its endpoint, both until the lease ends.
type claim struct {
	Endpoint, Delivery string
	slot               string
	until              time.Time
}

var member = []byte{1} // Val of a set member's Write: present

// placesWrites are the writes that give an endpoint its places, all free:
// made with the endpoint.
func placesWrites(ep string) []store.Write {
	ws := make([]store.Write, PerEndpointInFlight)
	for i := range ws {
		ws[i] = store.Write{Key: queueSlots + ep, Member: strconv.Itoa(i), Val: member}
	}
	return ws
}

// enqueueWrites are the writes that make the delivery dlv of ep due at
// at, which is now or earlier: the Apply of the change that makes the
// delivery carries them.
func enqueueWrites(ep, dlv string, at time.Time) []store.Write {
	ms := at.UnixMilli()
	return []store.Write{
		{Key: queueDue + ep, Member: dlv, Val: member, Score: ms},
		{Key: queueReady, Member: ep, Val: member, Score: ms},
	}
}

// claim claims up to n due deliveries at now, each with a place on its
// endpoint, spread over the endpoints with something due: as many of
// them as n, and n / that many places of each, rounded up. A worker
// keeps its endpoint's place while the endpoint has more due (handOff),
// so that spreading makes the endpoints' backlogs go down together,
// rather than a few endpoints at a time, the last few with workers idle.
func (q *queue) claim(ctx context.Context, now time.Time, n int) ([]claim, error) {
	if n <= 0 {
		return nil, nil
	}
	ms, until := now.UnixMilli(), now.Add(q.lease)
	eps, err := q.st.ZClaim(ctx, queueReady, ms, now.Add(readyHold).UnixMilli(), n)
	if err != nil || len(eps) == 0 {
		return nil, err
	}
	each := (n + len(eps) - 1) / len(eps)
	var out []claim
	for _, ep := range eps {
		if len(out) == n {
			// Claimed beyond what is left: looked at again at once.
			if err := q.refresh(ctx, ep.Member); err != nil {
				return out, err
			}
			continue
		}
		cs, err := q.claimOf(ctx, ep.Member, now, until, min(n-len(out), each, PerEndpointInFlight))
		out = append(out, cs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// claimOf claims up to n due deliveries of ep, as it has free places. An
// endpoint with none free stays held in queueReady for readyHold: the
// holders of its places take its next deliveries as they end theirs.
func (q *queue) claimOf(ctx context.Context, ep string, now, until time.Time, n int) ([]claim, error) {
	ms := now.UnixMilli()
	slots, err := q.st.ZClaim(ctx, queueSlots+ep, ms, until.UnixMilli(), n)
	if err != nil {
		return nil, err
	}
	if len(slots) == 0 { // none free; or none at all, if a crash cut short ep's placesWrites: made now
		_, has, err := q.head(ctx, queueSlots+ep)
		if err != nil || has {
			return nil, err
		}
		return nil, q.st.Apply(ctx, placesWrites(ep))
	}
	due, err := q.st.ZClaim(ctx, queueDue+ep, ms, until.UnixMilli(), len(slots))
	if err != nil {
		return nil, err // the places come free when the lease ends
	}
	out := make([]claim, len(due))
	for i, d := range due {
		out[i] = claim{Endpoint: ep, Delivery: d.Member, slot: slots[i].Member, until: until}
	}
	for _, s := range slots[len(due):] {
		if err := q.st.ZAdd(ctx, queueSlots+ep, s.Member, 0); err != nil {
			return out, err
		}
	}
	return out, q.refresh(ctx, ep)
}

// refresh sets ep's entry in queueReady to the earliest score in its due
// set, or removes it when the set is empty. A change made meanwhile by
// another (a delivery made due now, with its entry) is seen by the second
// read, which sets the entry again: the entry is never left later than
// what is due.
func (q *queue) refresh(ctx context.Context, ep string) error {
	first, ok, err := q.head(ctx, queueDue+ep)
	if err != nil {
		return err
	}
	if ok {
		err = q.st.ZAdd(ctx, queueReady, ep, first)
	} else {
		err = q.st.ZRem(ctx, queueReady, ep)
	}
	if err != nil {
		return err
	}
	again, ok2, err := q.head(ctx, queueDue+ep)
	if err != nil || !ok2 || ok && again >= first {
		return err
	}
	return q.st.ZAdd(ctx, queueReady, ep, again)
}

// claimed reports whether d, pending, sits in its endpoint's due set at
// score past its own due time: claimed, its score the lease's end.
func claimed(d *Delivery, score int64) bool {
	return time.Unix(0, d.NextAt).UnixMilli() < score
}

// setDue makes dueWrite(c, at) in a call of its own.
func (q *queue) setDue(ctx context.Context, c claim, at time.Time) error {
	return q.st.Apply(ctx, []store.Write{dueWrite(c, at)})
}

// handOff is what the holder of c does once c's attempt is written: it
// claims the next due delivery of the endpoint with c's place, and
// returns it; with none due, it frees the place and returns false. held
// is when the place's lease ends, as the writes of c's outcome renewed it
// (renewWrite); zero when they did not, and handOff renews it itself, but
// not once c's lease has run out: the place may be another's by then.
func (q *queue) handOff(ctx context.Context, c claim, now, held time.Time) (claim, bool, error) {
	renew := held.IsZero()
	if renew {
		if !now.Before(c.until) {
			return claim{}, false, nil
		}
		held = now.Add(q.lease)
	}
	due, err := q.st.ZClaim(ctx, queueDue+c.Endpoint, now.UnixMilli(), held.UnixMilli(), 1)
	if err != nil {
		return claim{}, false, err
	}
	if len(due) == 1 {
		if renew {
			err = q.st.ZAdd(ctx, queueSlots+c.Endpoint, c.slot, held.UnixMilli())
		}
		return claim{Endpoint: c.Endpoint, Delivery: due[0].Member, slot: c.slot, until: held}, true, err
	}
	if err := q.st.ZAdd(ctx, queueSlots+c.Endpoint, c.slot, 0); err != nil {
		return claim{}, false, err
	}
	return claim{}, false, q.refresh(ctx, c.Endpoint)
}

// renewWrite is the write that holds c's place until until, for handOff:
// made with the writes that end c's attempt, so that they share one call.
func renewWrite(c claim, until time.Time) store.Write {
	return store.Write{Key: queueSlots + c.Endpoint, Member: c.slot, Val: member, Score: until.UnixMilli()}
}

// dueWrite is the write that takes c's delivery out of its endpoint's due
// set (it has ended), or, when at is not zero, makes it due again at at.
func dueWrite(c claim, at time.Time) store.Write {
	if at.IsZero() {
		return store.Write{Key: queueDue + c.Endpoint, Member: c.Delivery}
	}
	return store.Write{Key: queueDue + c.Endpoint, Member: c.Delivery, Val: member, Score: at.UnixMilli()}
}

// next returns when the earliest endpoint in queueReady comes due, or
// false when none is listed.
func (q *queue) next(ctx context.Context) (time.Time, bool, error) {
	ms, ok, err := q.head(ctx, queueReady)
	return time.UnixMilli(ms), ok, err
}

// head returns the lowest score in the sorted set key, or false when the
// set is empty.
func (q *queue) head(ctx context.Context, key string) (int64, bool, error) {
	h, err := q.st.ZRange(ctx, key, math.MinInt64, math.MaxInt64, 1, false)
	if err != nil || len(h) == 0 {
		return 0, false, err
	}
	return h[0].Score, true, nil
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
