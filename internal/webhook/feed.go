package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The change feed of a shared webhook state (share.go): what a
// replica reads to take in the others' writes, and the records'
// merging into its copy.

// feedMember is the feed's entry for the write gen of ops: a JSON list
// of the counter and each record's kind:id.
func feedMember(gen int64, ops []hookOp) string {
	names := make([]string, 0, 1+len(ops))
	names = append(names, strconv.FormatInt(gen, 10))
	for _, op := range ops {
		names = append(names, op.kind+":"+op.id)
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// feedEntry is a record the feed names, read for catchUp.
type feedEntry struct {
	kind, id string
	val      []byte // nil: deleted
}

// errBehind: the copy cannot catch up by the feed, and must be read
// again whole, which only a holder of the lock may do (catchUp).
var errBehind = errors.New("webhooks: the copy of the shared state is to be read again")

// catchUp takes in the changes the other replicas wrote since the last
// call. When the feed cannot tell what changed (the store lost its data,
// or dropped entries this copy had not taken in), it reads the whole
// state again if whole, which the holder of the lock says, before any
// change joins it; otherwise it fails with errBehind. With nothing
// shared it does nothing.
func (hk *Hooks) CatchUp(ctx context.Context, whole bool) error {
	sh := hk.Share
	if sh == nil {
		return nil
	}
	hk.persistMu.Lock()
	defer hk.persistMu.Unlock()
	epoch, err := sh.readEpoch(ctx)
	if err != nil {
		return err
	}
	gen, err := Counter(ctx, sh.st, ShareGen)
	if err != nil || gen == sh.seen && epoch == sh.epoch && !sh.behind {
		return err
	}
	floor, err := Counter(ctx, sh.st, ShareFloor)
	if err != nil {
		return err
	}
	if sh.behind || epoch != sh.epoch || gen < sh.seen || sh.seen < floor {
		return hk.readAgain(ctx, whole, epoch, gen, floor)
	}
	list, err := sh.st.ZRange(ctx, ShareFeed, sh.seen+1, math.MaxInt64, 0, false)
	if err != nil {
		return err
	}
	kinds := map[string]int{KindEndpoint: 0, KindEvent: 1, kindDelivery: 2, kindIdem: 3}
	var entries []feedEntry
	named := map[string]bool{}
	for _, m := range list {
		var names []string
		if json.Unmarshal([]byte(m.Member), &names) != nil || len(names) == 0 {
			continue
		}
		for _, name := range names[1:] { // names[0]: the counter, which makes the entry unique
			kind, id, _ := strings.Cut(name, ":")
			if _, ok := kinds[kind]; !ok || named[name] {
				continue
			}
			named[name] = true
			b, err := sh.st.Get(ctx, HookKey(kind, id))
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			entries = append(entries, feedEntry{kind, id, b})
		}
	}
	// A trim that came between the floor read above and the list may
	// have dropped entries past this copy's last: read again.
	if floor, err = Counter(ctx, sh.st, ShareFloor); err != nil {
		return err
	}
	if sh.seen < floor {
		return hk.readAgain(ctx, whole, epoch, gen, floor)
	}
	// Endpoints before the deliveries on them, events before theirs.
	slices.SortStableFunc(entries, func(a, b feedEntry) int { return cmp.Compare(kinds[a.kind], kinds[b.kind]) })
	evs, err := hk.eventsFor(ctx, entries)
	if err != nil {
		return err
	}
	hk.Mu.Lock()
	hk.takeInLocked(entries, evs)
	hk.Mu.Unlock()
	for _, e := range entries {
		hk.index(e.kind, e.id, e.val != nil)
	}
	for _, m := range list {
		sh.seen = max(sh.seen, m.Score)
	}
	return nil
}

// readAgain is catchUp's whole reading, the feed named epoch, its
// counter at gen. hk.persistMu must be held.
func (hk *Hooks) readAgain(ctx context.Context, whole bool, epoch string, gen, floor int64) error {
	sh := hk.Share
	if !whole {
		return errBehind
	}
	// Redis lost its data (restarted empty), or this copy missed
	// entries since dropped.
	hk.Log.Warn("webhooks: reading the shared webhook state again", "seen", sh.seen, "counter", gen, "floor", floor)
	if err := hk.reload(ctx); err != nil {
		return err
	}
	sh.seen, sh.epoch = gen, epoch
	return nil
}

// eventsFor returns the events of the new deliveries among entries: from
// entries, the copy, or (a retry on another replica of an event this
// copy has forgotten) the store. Those of the copy are held here too, so
// that the copy dropping one meanwhile (its last delivery trimmed) does
// not lose a new delivery of it.
func (hk *Hooks) eventsFor(ctx context.Context, entries []feedEntry) (map[string]*Event, error) {
	evs := map[string]*Event{}
	var want []string
	hk.Mu.Lock()
	for _, e := range entries {
		switch {
		case e.val == nil:
		case e.kind == KindEvent:
			var ev Event
			if json.Unmarshal(e.val, &ev) == nil {
				evs[ev.ID] = &ev
			}
		case e.kind == kindDelivery && hk.Deliv[e.id] == nil:
			var d struct {
				EventID string `json:"event_id"`
			}
			if json.Unmarshal(e.val, &d) != nil || evs[d.EventID] != nil {
				continue
			}
			if ev := hk.Events[d.EventID]; ev != nil {
				evs[d.EventID] = ev
			} else {
				want = append(want, d.EventID)
			}
		}
	}
	hk.Mu.Unlock()
	for _, id := range want {
		b, err := hk.Share.st.Get(ctx, HookKey(KindEvent, id))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var ev Event
		if json.Unmarshal(b, &ev) == nil {
			evs[ev.ID] = &ev
		}
	}
	return evs, nil
}

// takeInLocked makes the copy hold entries, the records other replicas
// wrote. Taking them in writes nothing back: only what the leader does
// about them (consequences) is its own change, written at its next
// persist. hk.Mu must be held.
func (hk *Hooks) takeInLocked(entries []feedEntry, evs map[string]*Event) {
	touched, gen := hk.Touched, hk.touchGen
	hk.Touched = nil
	var then []func()
	for _, en := range entries {
		if f := hk.takeInOneLocked(en, evs); f != nil {
			then = append(then, f)
		}
	}
	hk.Touched, hk.touchGen = touched, gen
	for _, f := range then {
		f()
	}
}

// takeInOneLocked takes in one record, and returns what the leader does
// about it, or nil. hk.Mu must be held.
func (hk *Hooks) takeInOneLocked(en feedEntry, evs map[string]*Event) func() {
	switch en.kind {
	case KindEndpoint:
		return hk.takeInEndpointLocked(en)
	case kindDelivery:
		return hk.takeInDeliveryLocked(en, evs)
	case kindIdem:
		store, _, _ := strings.Cut(en.id, "\x00")
		_, had := hk.Idem[en.id]
		var m idem
		if en.val == nil || json.Unmarshal(en.val, &m) != nil {
			if had {
				delete(hk.Idem, en.id)
				hk.IdemCount[store]--
			}
			return nil
		}
		if !had {
			hk.IdemCount[store]++
		}
		hk.Idem[en.id] = m
		hk.IdemQueue = append(hk.IdemQueue, IdemEntry{en.id, m.Expires})
	}
	return nil // events come with their deliveries
}

// takeInEndpointLocked takes in an endpoint's record. The leader keeps
// its own failure window, enabled state and reason (failing.go: it
// changes them as attempts end, and writes them at its next persist)
// unless the record's enabled state is another than the last written
// or taken in: a request enabled or disabled the endpoint.
func (hk *Hooks) takeInEndpointLocked(en feedEntry) func() {
	e := hk.Endpoints[en.id]
	var ne Endpoint
	if en.val == nil || json.Unmarshal(en.val, &ne) != nil {
		if e != nil {
			hk.RemoveEndpointLocked(e)
		}
		return nil
	}
	if e == nil {
		st := hk.Cfg.Store(ne.StoreID)
		if st == nil {
			return nil // of a store this replica does not serve
		}
		ne.StoreID = st.ID
		ne.written = ne.Enabled
		hk.AddEndpointLocked(&ne)
		return nil
	}
	wasEnabled, events := e.Enabled, e.Events
	e.URL, e.Description, e.Events = ne.URL, ne.Description, ne.Events
	e.Secret, e.OldSecret, e.OldSecretEnd = ne.Secret, ne.OldSecret, ne.OldSecretEnd
	e.NextSeq, e.UpdatedAt = max(e.NextSeq, ne.NextSeq), max(e.UpdatedAt, ne.UpdatedAt)
	if !hk.Leading || ne.Enabled != e.written {
		e.Enabled, e.DisabledReason, e.FailingSince = ne.Enabled, ne.DisabledReason, ne.FailingSince
	}
	e.written = ne.Enabled
	if !hk.Leading {
		return nil
	}
	switch {
	case wasEnabled && !e.Enabled:
		return func() { hk.DropQueuedLocked(e, DropAll) }
	case !slices.Equal(events, e.Events):
		return func() { hk.DropQueuedLocked(e, e.RefusesLocked) }
	}
	return nil
}

// takeInDeliveryLocked takes in a delivery's record: a new delivery, or
// (in a follower) the leader's change of one.
func (hk *Hooks) takeInDeliveryLocked(en feedEntry, evs map[string]*Event) func() {
	d := hk.Deliv[en.id]
	if d != nil && hk.sendingLocked(time.Now()) {
		return nil // the leader is the one writer of the deliveries it has
	}
	var nd Delivery
	if en.val == nil || json.Unmarshal(en.val, &nd) != nil {
		if d != nil {
			hk.dropDeliveryLocked(d)
		}
		return nil
	}
	e := hk.Endpoints[nd.EndpointID]
	if e == nil {
		return nil
	}
	if d == nil {
		ev := cmp.Or(hk.Events[nd.EventID], evs[nd.EventID])
		if ev == nil {
			return nil
		}
		d = &nd
		d.Ev, d.Index = ev, -1
		hk.referLocked(d)
		i, _ := slices.BinarySearchFunc(e.Log, d.Seq, func(x *Delivery, seq uint64) int { return cmp.Compare(x.Seq, seq) })
		e.Log = slices.Insert(e.Log, i, d)
		hk.accountLocked(e, d, 1)
		if hk.Leading {
			return func() { hk.trimLogLocked(e) }
		}
		return nil
	}
	hk.accountLocked(e, d, -1)
	d.Status, d.NextAt, d.Attempts, d.Reason, d.Explicit, d.WhileDisabled = nd.Status, nd.NextAt, nd.Attempts, nd.Reason, nd.Explicit, nd.WhileDisabled
	hk.accountLocked(e, d, 1)
	return nil
}

// accountLocked counts the delivery d of e in (sign 1) or out of (-1)
// the copy's budgets and schedule. hk.Mu must be held.
func (hk *Hooks) accountLocked(e *Endpoint, d *Delivery, sign int64) {
	if d.Status != StatusPending {
		e.Finished += int(sign)
		e.LogBytes += sign * LogCost(d)
		return
	}
	hk.Pending[e.StoreID] += sign * LogCost(d)
	switch {
	case sign > 0:
		hk.scheduleLocked(d)
	case d.Index >= 0:
		hk.Sched.Remove(d)
	}
}

// dropDeliveryLocked removes d, which another replica deleted (trimmed
// from its log), from the copy. hk.Mu must be held.
func (hk *Hooks) dropDeliveryLocked(d *Delivery) {
	if e := hk.Endpoints[d.EndpointID]; e != nil {
		hk.accountLocked(e, d, -1)
		e.Log = slices.DeleteFunc(e.Log, func(x *Delivery) bool { return x == d })
	}
	hk.forgetLocked(d)
}

// reload reads the whole shared state again, as a start does, and puts
// it in place of the copy in one step. Attempts under way are
// forgotten (finishLocked drops them). hk.persistMu must be held.
func (hk *Hooks) reload(ctx context.Context) error {
	fresh := NewHooks(hk.Cfg)
	fresh.St, fresh.Log = hk.St, hk.Log
	if err := fresh.LoadStore(ctx); err != nil {
		return err
	}
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	hk.stepDownLocked()
	hk.Endpoints, hk.ByStore, hk.Events, hk.Deliv = fresh.Endpoints, fresh.ByStore, fresh.Events, fresh.Deliv
	hk.Idem, hk.IdemQueue, hk.Pending, hk.IdemCount = fresh.Idem, fresh.IdemQueue, fresh.Pending, fresh.IdemCount
	hk.Sched, hk.Ready, hk.Parked, hk.indexed = fresh.Sched, nil, fresh.Parked, fresh.indexed
	clear(hk.Touched) // what the copy had not written is what it could not have written right
	hk.Share.behind = false
	return nil
}

// counter reads the counter at key, 0 when there is none.
func Counter(ctx context.Context, st store.Store, key string) (int64, error) {
	b, err := st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

// trimFeed drops the feed entries older than feedKeep. One caller at a
// time (the leader's tick), under the lock: no write comes between the
// list and the drop.
func (hk *Hooks) TrimFeed(ctx context.Context, now time.Time) error {
	sh := hk.Share
	if now.Sub(sh.trimmed) < FeedTrim {
		return nil
	}
	sh.trimmed = now
	gen, err := Counter(ctx, sh.st, ShareGen)
	if err != nil {
		return err
	}
	if n := len(sh.marks); n > 0 && gen < sh.marks[n-1].gen {
		sh.marks = nil // the counter started again (the store lost its data): they name none of it
	}
	sh.marks = append(sh.marks, feedMark{now, gen})
	i := 0
	for i < len(sh.marks) && now.Sub(sh.marks[i].at) > feedKeep {
		i++
	}
	if i == 0 {
		return nil
	}
	floor := sh.marks[i-1].gen
	sh.marks = sh.marks[i:]
	old, err := sh.st.ZRange(ctx, ShareFeed, math.MinInt64, floor, 0, false)
	if err != nil {
		return err
	}
	// The floor first: a replica that reads it above its own last entry
	// reads the state again rather than miss what goes.
	ws := []store.Write{{Key: ShareFloor, Val: []byte(strconv.FormatInt(floor, 10))}}
	for _, m := range old {
		ws = append(ws, store.Write{Key: ShareFeed, Member: m.Member})
	}
	return sh.st.Apply(ctx, ws)
}
