package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"deeplink/internal/store"
)

// logged writes a delivery of ep of an event of typ made at at, with
// status, logged with score (its creation in unix microseconds, or
// another to make entries of equal score), and returns its id.
func logged(t *testing.T, st store.Store, ep, typ, status string, at time.Time, score int64) string {
	t.Helper()
	ev := newEvent(typ, json.RawMessage(`{"id":"o1","status":"pending"}`), at)
	d := newDelivery(testStore, ep, ev, at)
	d.Status = status
	b, err := marshalRecord(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Apply(context.Background(), []store.Write{
		{Key: hookKey(kindDelivery, d.ID), Val: b},
		{Key: logKey + ep, Member: d.ID, Val: member, Score: score},
	}); err != nil {
		t.Fatal(err)
	}
	return d.ID
}

func ids(ds []*Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// TestLogPage pages through a log newest first, filtered or not, over
// entries of equal score too, and refuses another endpoint's cursor.
func TestLogPage(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	var entries []store.Scored
	var failed []string
	for i := range 7 {
		status := []string{StatusSucceeded, StatusFailed}[i%2]
		score := now.UnixMicro() + int64(i/3) // three entries a score
		id := logged(t, r.st, e.ID, EventOrderStatus, status, now.Add(time.Duration(i)*time.Second), score)
		entries = append(entries, store.Scored{Member: id, Score: score})
		if status == StatusFailed {
			failed = append(failed, id)
		}
	}
	// Newest first: by score, and within one score by id, both reversed.
	slices.SortFunc(entries, func(a, b store.Scored) int {
		return -cmp.Or(cmp.Compare(a.Score, b.Score), cmp.Compare(a.Member, b.Member))
	})
	var want []string
	for _, x := range entries {
		want = append(want, x.Member)
	}
	for _, tt := range []struct {
		status string
		limit  int
		want   []string
	}{
		{"", 3, want},
		{"", 7, want},
		{"", 100, want},
		{StatusFailed, 2, filter(want, failed)},
	} {
		t.Run(fmt.Sprint(tt.status, tt.limit), func(t *testing.T) {
			var got []string
			q := DeliveryQuery{Status: tt.status, Limit: tt.limit}
			for pages := 0; ; pages++ {
				page, next, err := r.logPage(ctx, e, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > tt.limit || pages > 10 {
					t.Fatalf("page of %d with limit %d", len(page), tt.limit)
				}
				got = append(got, ids(page)...)
				if next == "" {
					break
				}
				q.Cursor = next
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("pages of %d, status %q = %q; want %q", tt.limit, tt.status, got, tt.want)
			}
		})
	}
	_, next, _ := r.logPage(ctx, e, DeliveryQuery{Limit: 1})
	other := newTestEndpoint()
	if _, _, err := r.logPage(ctx, other, DeliveryQuery{Limit: 1, Cursor: next}); !errors.Is(err, ErrBadCursor) {
		t.Errorf("another endpoint's cursor: %v; want ErrBadCursor", err)
	}
}

// filter is the ids of all that are in some, in all's order.
func filter(all, some []string) []string {
	var out []string
	for _, id := range all {
		if slices.Contains(some, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestRecoverableAndLastDay: recover finds the failed deliveries whose
// event was made at or after since, oldest first; the dashboard's counts
// put each delivery of the last 24 hours in its hour.
func TestRecoverableAndLastDay(t *testing.T) {
	r, now := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	end := now.Truncate(time.Hour).Add(time.Hour)
	for _, d := range []struct {
		ago    time.Duration
		status string
	}{
		{25 * time.Hour, StatusFailed},
		{23 * time.Hour, StatusSucceeded},
		{5 * time.Hour, StatusFailed},
		{30 * time.Minute, StatusFailed},
		{10 * time.Minute, StatusPending},
	} {
		at := end.Add(-d.ago)
		logged(t, r.st, e.ID, EventOrderStatus, d.status, at, at.UnixMicro())
	}
	evs, err := r.recoverable(ctx, e, end.Add(-6*time.Hour))
	if err != nil || len(evs) != 2 || evs[0].CreatedAt > evs[1].CreatedAt {
		t.Errorf("recoverable since 6 h ago = %d events, %v; want the 2 failed since, oldest first", len(evs), err)
	}
	hours, err := r.lastDay(ctx, e, end)
	if err != nil {
		t.Fatal(err)
	}
	want := [24]Counts{1: {Succeeded: 1}, 19: {Failed: 1}, 23: {Failed: 1, Pending: 1}}
	if hours != want {
		t.Errorf("lastDay = %+v; want %+v", hours, want)
	}
}
