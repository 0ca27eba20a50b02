package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"time"

	"deeplink/internal/store"
)

// An endpoint's delivery log in the state of record (records.go): the
// sorted set logKey + endpoint id of its deliveries, scored by when each
// was made (unix microseconds, within the 2^53 that Redis's scores hold
// exactly; deliveries made in one microsecond come in the order of their
// ids), and each delivery's record.

// logBatch is how many of a log's entries one read takes.
const logBatch = 100

// walkLog calls f with e's deliveries, newest first (oldest first when
// !rev), from the cursor at (from, after) on: with rev, those scored
// below from; without, those scored above it; and of those scored from,
// the ones whose id comes after after in the walk's order (all of them
// when after is ""). It stops when f returns false. An entry whose
// record is gone (trimmed meanwhile) is passed over.
func (r *records) walkLog(ctx context.Context, ep string, rev bool, from int64, after string, f func(score int64, d *Delivery) bool) error {
	for {
		lo, hi := from, int64(math.MaxInt64)
		if rev {
			lo, hi = math.MinInt64, from
		}
		batch, err := r.st.ZRange(ctx, logKey+ep, lo, hi, logBatch, rev)
		if err != nil {
			return err
		}
		for _, m := range batch {
			// Equal scores come in the order of their members: past the
			// cursor's member means below it going back, above it going on.
			if after != "" && m.Score == from && (rev && m.Member >= after || !rev && m.Member <= after) {
				continue
			}
			switch _, d, err := readRecord[Delivery](ctx, r.st, hookKey(kindDelivery, m.Member)); {
			case errors.Is(err, store.ErrNotFound): // trimmed meanwhile: passed over
			case err != nil:
				return err
			case !f(m.Score, d):
				return nil
			}
		}
		if len(batch) < logBatch {
			return nil
		}
		last := batch[len(batch)-1]
		from, after = last.Score, last.Member
	}
}

// logPage returns a page of e's log, newest first: of the type and status
// q names ("": any), q.Limit of them, after q.Cursor; and the cursor of
// the next page, "" when there is none.
func (r *records) logPage(ctx context.Context, e *Endpoint, q DeliveryQuery) (page []*Delivery, next string, err error) {
	from, after, ok := int64(math.MaxInt64), "", true // from the newest
	if q.Cursor != "" {
		if from, after, ok = parseLogCursor(e.ID, q.Cursor); !ok {
			return nil, "", ErrBadCursor
		}
	}
	var last int64
	err = r.walkLog(ctx, e.ID, true, from, after, func(score int64, d *Delivery) bool {
		if q.EventType != "" && d.Event.Type != q.EventType || q.Status != "" && d.Status != q.Status {
			return true
		}
		if len(page) == q.Limit {
			next = logCursor(e.ID, last, page[len(page)-1].ID)
			return false
		}
		page = append(page, d)
		last = score
		return true
	})
	return page, next, err
}

// logCursor is the next_cursor that continues the log of the endpoint ep
// below the entry (score, id): both, and a tag of ep, so that every
// other endpoint refuses it.
func logCursor(ep string, score int64, id string) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12+len(id)), uint64(score))
	b = append(b, cursorTag(ep)...)
	return base64.RawURLEncoding.EncodeToString(append(b, id...))
}

// parseLogCursor returns the entry of a cursor logCursor made for ep, or
// false for anything else.
func parseLogCursor(ep, c string) (score int64, id string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) <= 12 || string(b[8:12]) != string(cursorTag(ep)) {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(b)), string(b[12:]), true
}

// recoverable returns the events recover sends to e again, oldest
// delivery first: the event of every failed delivery of e whose event was
// made at or after since (its created_at, in whole seconds as it is
// shown). An event with two failed deliveries goes twice.
func (r *records) recoverable(ctx context.Context, e *Endpoint, since time.Time) ([]*Event, error) {
	var evs []*Event
	err := r.walkLog(ctx, e.ID, false, math.MinInt64, "", func(_ int64, d *Delivery) bool {
		if ev := d.Event; d.Status == StatusFailed && !time.Unix(ev.CreatedAt, 0).Before(since) {
			evs = append(evs, ev)
		}
		return true
	})
	return evs, err
}

// lastDay counts e's deliveries made in each of the 24 hours before end,
// oldest hour first, by their status.
func (r *records) lastDay(ctx context.Context, e *Endpoint, end time.Time) (hours [24]Counts, err error) {
	start := end.Add(-24 * time.Hour)
	err = r.walkLog(ctx, e.ID, true, end.UnixMicro()-1, "", func(score int64, d *Delivery) bool {
		at := time.Unix(d.CreatedAt, 0)
		if at.Before(start) {
			return false
		}
		if !at.Before(end) {
			return true
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
		return true
	})
	return hours, err
}

// logBytesKey + endpoint id counts what the endpoint's finished
// deliveries hold (logCost each): added to as each ends, taken from as
// trim drops them. doneKey + endpoint id lists the finished ones, by
// their place in the log, so that trim finds the oldest without reading
// the pending ones before them.
const (
	logBytesKey = "hooks:logbytes:"
	doneKey     = "hooks:done:"
)

// endedWrites are the writes that account for d, of the store, once it
// has ended: what it held of the store's pending budget is given back
// and counted as its endpoint's log's, and trim may drop it.
func endedWrites(storeID string, d *Delivery) []store.Write {
	if d.written == 0 { // not written here: its record's length again
		d.written = len(d.appendRecord(nil))
	}
	return []store.Write{
		releaseWrite(storeID, 1, len(d.Event.Body)),
		{Key: logBytesKey + d.EndpointID, Add: logCost(d.written)},
		{Key: doneKey + d.EndpointID, Member: d.ID, Val: member, Score: d.LoggedAt},
	}
}

// trim drops the endpoint ep's finished deliveries that are not among
// the newest size of its log, then the oldest finished ones while they
// hold more than budget bytes; pending ones stay, whatever their age. It
// reads the newest size+1 of the log (never the whole log: a backlog of
// pending deliveries may make it long), the finished ones, the counter,
// and the records of only those it drops: cheap enough for every
// delivery that ends. It returns how many it dropped.
func (r *records) trim(ctx context.Context, ep string, size int, budget int64) (int, error) {
	newest, err := r.st.ZRange(ctx, logKey+ep, math.MinInt64, math.MaxInt64, size+1, true)
	if err != nil {
		return 0, err
	}
	held, err := r.counter(ctx, logBytesKey+ep)
	if err != nil {
		return 0, err
	}
	beyond := len(newest) > size // some are not among the newest size
	over := held - budget
	if !beyond && over <= 0 {
		return 0, nil
	}
	done, err := r.st.ZRange(ctx, doneKey+ep, math.MinInt64, math.MaxInt64, 0, false)
	if err != nil {
		return 0, err
	}
	var ws []store.Write
	var freed int64
	for _, m := range done { // oldest first
		// The log's order: by score, then by member.
		past := beyond && (m.Score < newest[size].Score || m.Score == newest[size].Score && m.Member <= newest[size].Member)
		if !past && over <= 0 {
			break
		}
		ws = append(ws, store.Write{Key: logKey + ep, Member: m.Member}, store.Write{Key: doneKey + ep, Member: m.Member})
		// Taken, so that of trims racing (on two replicas) one counts
		// what it held.
		switch b, err := r.st.Take(ctx, hookKey(kindDelivery, m.Member)); {
		case err == nil:
			over, freed = over-logCost(len(b)), freed+logCost(len(b))
		case !errors.Is(err, store.ErrNotFound):
			return 0, err
		}
	}
	if len(ws) == 0 {
		return 0, nil
	}
	if err := r.st.Apply(ctx, ws); err != nil {
		return 0, err
	}
	_, err = r.st.Add(ctx, logBytesKey+ep, -freed, time.Time{})
	return len(ws) / 2, err
}

// ValidCursor reports whether c is a next_cursor of the endpoint id's log.
func ValidCursor(id, c string) bool {
	_, _, ok := parseLogCursor(id, c)
	return ok
}

// cursorTag is the part of an endpoint's cursors that names it.
func cursorTag(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:4]
}
