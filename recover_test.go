package main

import (
	"cmp"
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of POST …/recover (API.md §5) through the real mux: which failed
// deliveries it sends again, that the receiver sees them as before, and
// its errors.

// whRecover calls recover on store A's endpoint ep with body.
func (w *whApp) whRecover(t *testing.T, ep string, body any) whResp {
	t.Helper()
	return w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/recover", key: whKeyA, body: body})
}

// whQueued checks a recover answer is 202 and returns its queued.
func whQueued(t *testing.T, r whResp) int {
	t.Helper()
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	n, ok := r.data()["queued"].(float64)
	require.True(t, ok, "no queued in %s", r.raw)
	return int(n)
}

// whEventOf returns the event id and created_at of a delivery detail, as
// its request body shows them.
func whEventOf(t *testing.T, d map[string]any) (string, time.Time) {
	t.Helper()
	var env struct {
		ID        string `json:"id"`
		CreatedAt int64  `json:"created_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(d["request_body"].(string)), &env))
	return env.ID, time.Unix(env.CreatedAt, 0)
}

// whSettled waits until store A's endpoint ep has no pending delivery.
func (w *whApp) whSettled(t *testing.T, ep string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := w.try(whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?status=pending", key: whKeyA})
		return err == nil && r.status == http.StatusOK && len(r.body["data"].([]any)) == 0
	}, whWait, 10*time.Millisecond, "deliveries of %s still pending", ep)
}

// whDrain empties rc's record of requests and returns their count.
func whDrain(rc *whReceiver) int32 {
	for len(rc.hits) > 0 {
		<-rc.hits
	}
	return rc.count.Load()
}

// TestRecover: recover sends again, now, the events of the endpoint's
// failed deliveries created at or after since, and only those; the
// receiver gets each once more with its webhook-id and body as before.
func TestRecover(t *testing.T) {
	type sent map[string]time.Time // event name → its created_at
	plus2 := time.FixedZone("", 2*60*60)
	for _, tt := range []struct {
		name  string
		since func(c sent) string
		want  []string // the events sent again
	}{
		{"between the old and the new", func(c sent) string { return c["new1"].Add(-30 * time.Minute).Format(time.RFC3339) },
			[]string{"new1", "new2"}},
		{"at the first new event's created_at", func(c sent) string { return c["new1"].UTC().Format(time.RFC3339) },
			[]string{"new1", "new2"}},
		{"with an offset and a fraction of a second", func(c sent) string {
			return c["new1"].Add(-30*time.Minute + 500*time.Millisecond).In(plus2).Format(time.RFC3339Nano)
		}, []string{"new1", "new2"}},
		{"within the second of the first new event's created_at", func(c sent) string {
			return c["new1"].Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		}, []string{"new1", "new2"}},
		{"with a lower-case t and z, as RFC 3339 allows", func(c sent) string {
			return strings.ToLower(c["new1"].UTC().Format(time.RFC3339))
		}, []string{"new1", "new2"}},
		{"before them all", func(c sent) string { return c["old1"].Add(-time.Minute).Format(time.RFC3339) },
			[]string{"old1", "old2", "new1", "new2"}},
		{"after the newest", func(c sent) string { return c["delivered"].Add(time.Second).Format(time.RFC3339) }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := whStart(t, whFast())
			rc := whNewFlaky(t)
			ep, _ := w.whEndpoint(t, rc.URL)
			ids, created, bodies := map[string]string{}, sent{}, map[string]string{}
			send := func(name string, s whStep) {
				d := w.whSend(t, ep, rc, s)
				ids[name], created[name] = whEventOf(t, d)
				bodies[ids[name]] = d["request_body"].(string)
			}
			send("old1", whFail)
			send("old2", whFail)
			advance(w.app, time.Hour) // the new ones are an hour younger
			send("new1", whFail)
			send("new2", whFail)
			send("delivered", whOK) // the receiver answers 200 from now on
			before := whDrain(rc.whReceiver)

			since := tt.since(created)
			if n := whQueued(t, w.whRecover(t, ep, map[string]any{"since": since})); n != len(tt.want) {
				t.Errorf("recover(%q) queued = %d; want %d (created: %v)", since, n, len(tt.want), created)
			}
			var want, got []string
			for _, name := range tt.want {
				want = append(want, ids[name])
				h := rc.next(t, whWait)
				id := h.header.Get("Webhook-Id")
				got = append(got, id)
				assert.Equal(t, bodies[id], string(h.body), "the body sent before")
			}
			assert.ElementsMatch(t, want, got, "webhook-ids sent again")
			w.whSettled(t, ep)
			assert.Equal(t, before+int32(len(tt.want)), rc.count.Load(), "requests after recover")

			// The log keeps the failed deliveries and adds one, succeeded,
			// for each event sent again.
			log := w.whDeliveries(t, ep, "?limit=100")
			assert.Len(t, log, 5+len(tt.want))
			for _, d := range log[:len(tt.want)] {
				assert.Equal(t, webhook.StatusSucceeded, d["status"])
				assert.Contains(t, want, d["event_id"])
			}
			assert.Len(t, w.whDeliveries(t, ep, "?status=failed&limit=100"), 4)
		})
	}
}

// TestRecoverWholeLog: recover looks at the whole log, not one page.
func TestRecoverWholeLog(t *testing.T) {
	const n = 25 // more than a page of the log (20)
	w := whStart(t, whFast())
	rc := whNewFlaky(t)
	rc.down.Store(true)
	ep, _ := w.whEndpoint(t, rc.URL)
	var want []string
	for range n {
		want = append(want, w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), ""))
	}
	w.whSettled(t, ep)
	rc.down.Store(false)
	whDrain(rc.whReceiver)

	if got := whQueued(t, w.whRecover(t, ep, map[string]any{"since": "2000-01-01T00:00:00Z"})); got != n {
		t.Fatalf("recover queued = %d; want %d", got, n)
	}
	var got []string
	for range n {
		got = append(got, rc.next(t, whWait).header.Get("Webhook-Id"))
	}
	assert.ElementsMatch(t, want, got)
}

// TestRecoverEveryFailedDelivery: recover sends again every delivery of
// the endpoint that has failed, as the contract words it: a second recover
// sends the first's failed deliveries again, and those it made that
// failed too.
func TestRecoverEveryFailedDelivery(t *testing.T) {
	for _, tt := range []struct {
		name       string
		downAfter  bool // the receiver still fails after the first recover
		wantSecond int
	}{
		{"the receiver is back", false, 2},
		{"the receiver still fails", true, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := whStart(t, whFast())
			rc := whNewFlaky(t)
			ep, _ := w.whEndpoint(t, rc.URL)
			for range 2 {
				w.whSend(t, ep, rc, whFail)
			}
			since := map[string]any{"since": "2000-01-01T00:00:00Z"}
			rc.down.Store(tt.downAfter)
			if got := whQueued(t, w.whRecover(t, ep, since)); got != 2 {
				t.Fatalf("first recover queued = %d; want 2", got)
			}
			w.whSettled(t, ep)
			if got := whQueued(t, w.whRecover(t, ep, since)); got != tt.wantSecond {
				t.Errorf("second recover queued = %d; want %d", got, tt.wantSecond)
			}
		})
	}
}

// TestRecoverDisabledEndpoint: as a manual retry, a delivery recover makes
// goes to a disabled endpoint once, without retries.
func TestRecoverDisabledEndpoint(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewFlaky(t)
	ep, _ := w.whEndpoint(t, rc.URL)
	w.whSend(t, ep, rc, whFail)
	w.whPatch(t, ep, map[string]any{"enabled": false})
	before := whDrain(rc.whReceiver)
	require.Equal(t, 1, whQueued(t, w.whRecover(t, ep, map[string]any{"since": "2000-01-01T00:00:00Z"})))
	w.whSettled(t, ep)
	d := w.whDeliveries(t, ep, "")[0]
	assert.Equal(t, webhook.StatusFailed, d["status"])
	assert.Equal(t, float64(1), d["attempt_count"], "no retry")
	assert.Equal(t, before+1, rc.count.Load())
}

// TestRecoverOverBudget: recover queues all it would or, past the
// store's budget of pending deliveries, nothing (503).
func TestRecoverOverBudget(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewFlaky(t)
	ep, _ := w.whEndpoint(t, rc.URL)
	body := w.whSend(t, ep, rc, whFail)["request_body"].(string)
	w.whSend(t, ep, rc, whFail)
	hk := w.app.srv.hooks
	hk.Budget.Pending = whPendingHeld(t, w, whStoreA) + webhook.NewCost(len(body)) // room for one
	since := map[string]any{"since": "2000-01-01T00:00:00Z"}
	r := w.whRecover(t, ep, since)
	whRequireError(t, r, http.StatusServiceUnavailable, "unavailable")
	assert.NotEmpty(t, r.header.Get("Retry-After"))
	assert.Len(t, w.whDeliveries(t, ep, ""), 2, "nothing queued")
	hk.Budget.Pending = webhook.PendingBudget
	assert.Equal(t, 2, whQueued(t, w.whRecover(t, ep, since)))
}

func TestRecoverInvalid(t *testing.T) {
	w := whStart(t, whFast())
	ep, _ := w.whEndpoint(t, "https://hooks.example.com/")
	other := w.whCreate(t, whStoreB, whKeyB, map[string]any{"url": "https://hooks.example.com/", "events": []string{webhook.EventOrderStatus}})["id"].(string)
	path := whEndpointPath(whStoreA, ep) + "/recover"
	ok := map[string]any{"since": "2025-01-31T09:00:00Z"}
	for _, tt := range []struct {
		name       string
		q          whReq
		wantStatus int
		wantCode   string
		wantFields []string
	}{
		{"no since", whReq{body: map[string]any{}}, 422, "validation_failed", []string{"since"}},
		{"since null", whReq{body: map[string]any{"since": nil}}, 422, "validation_failed", []string{"since"}},
		{"since empty", whReq{body: map[string]any{"since": ""}}, 422, "validation_failed", []string{"since"}},
		{"since a number", whReq{body: map[string]any{"since": 1735689600}}, 422, "validation_failed", []string{"since"}},
		{"since words", whReq{body: map[string]any{"since": "yesterday"}}, 422, "validation_failed", []string{"since"}},
		{"since a date alone", whReq{body: map[string]any{"since": "2025-01-31"}}, 422, "validation_failed", []string{"since"}},
		{"since without an offset", whReq{body: map[string]any{"since": "2025-01-31T09:00:00"}}, 422, "validation_failed", []string{"since"}},
		{"since with a space", whReq{body: map[string]any{"since": "2025-01-31 09:00:00Z"}}, 422, "validation_failed", []string{"since"}},
		{"since out of range", whReq{body: map[string]any{"since": "2025-13-31T09:00:00Z"}}, 422, "validation_failed", []string{"since"}},
		{"since not UTF-8", whReq{body: "{\"since\": \"2025-01-31T09:00:00Z\xff\"}"}, 422, "validation_failed", []string{"since"}},
		{"no body", whReq{body: ""}, 400, "invalid_json", nil},
		{"not JSON", whReq{body: `since=2025-01-31T09:00:00Z`}, 400, "invalid_json", nil},
		{"not application/json", whReq{body: `{"since": "2025-01-31T09:00:00Z"}`, ctype: "text/plain"}, 415, "unsupported_media_type", nil},
		{"no key", whReq{body: ok, key: "-"}, 401, "unauthorized", nil},
		{"wrong key", whReq{body: ok, key: whKeyB}, 401, "unauthorized", nil},
		{"unknown endpoint", whReq{body: ok, path: whEndpointPath(whStoreA, "we_unknown") + "/recover"}, 404, "not_found", nil},
		{"another store's endpoint", whReq{body: ok, path: whEndpointPath(whStoreA, other) + "/recover"}, 404, "not_found", nil},
		{"unknown store", whReq{body: ok, path: whEndpointPath(storeNone, ep) + "/recover"}, 404, "store_not_found", nil},
		{"GET", whReq{method: "GET"}, 405, "method_not_allowed", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.q
			q.method = cmp.Or(q.method, "POST")
			q.path = cmp.Or(q.path, path)
			switch q.key {
			case "":
				q.key = whKeyA
			case "-":
				q.key = ""
			}
			r := w.do(t, q)
			fields := whRequireError(t, r, tt.wantStatus, tt.wantCode)
			if !slices.Equal(fields, tt.wantFields) {
				t.Errorf("recover(%v) fields = %q; want %q", q.body, fields, tt.wantFields)
			}
		})
	}
	assert.Empty(t, w.whDeliveries(t, ep, ""), "nothing was queued")
}
