package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/egress"
	"deeplink/internal/webhook"
)

// Tests of what merchants receive and when (API.md §5.1, §6): the request,
// its signatures, retries, timeouts, redirects, the address guard,
// persistence of pending deliveries and isolation between endpoints. Every
// wait is on an outcome (the receiver's channel or the delivery log), never
// a sleep.

func TestDeliveryOverTLS(t *testing.T) {
	rc := whNewReceiver(t, true, nil)
	conf := whFast()
	conf.CAFile = whCAFile(t, rc.Server)
	// The receiver's certificate is trusted through trusted_ca_file, so this
	// is real TLS verification. allow_insecure_urls is on only because the
	// receiver listens on 127.0.0.1, a loopback address the guard refuses
	// otherwise (TestDeliveryToLoopbackRefused).
	conf.Insecure = true
	w := whStart(t, conf)
	ep, secret := w.whEndpoint(t, rc.URL+"/hooks/orders")
	require.True(t, strings.HasPrefix(rc.URL, "https://127.0.0.1:"), "receiver %s", rc.URL)

	object := map[string]any{"id": "ord_1", "status": "completed", "total": 1250.0, "items": []any{"a", "b"}}
	before := time.Now().Unix()
	evt := w.whPublish(t, whStoreA, whKeyA, map[string]any{"object": object}, "")
	h := rc.next(t, whWait)
	after := time.Now().Unix()

	// The body is exactly the envelope, nothing more.
	var env map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(h.body, &env), "body %s", h.body)
	keys := []string{}
	for k := range env {
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"id", "type", "created_at", "data"}, keys)
	var typed struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		CreatedAt int64  `json:"created_at"`
		Data      map[string]map[string]any
	}
	require.NoError(t, json.Unmarshal(h.body, &typed))
	assert.Equal(t, evt, typed.ID)
	assert.Equal(t, webhook.EventOrderStatus, typed.Type)
	assert.GreaterOrEqual(t, typed.CreatedAt, before)
	assert.LessOrEqual(t, typed.CreatedAt, after)
	assert.Equal(t, map[string]map[string]any{"object": object}, typed.Data)

	assert.Equal(t, "application/json", h.header.Get("Content-Type"))
	assert.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9._-]+/\S+$`), h.header.Get("User-Agent"), "User-Agent is <product>/<version>")
	assert.Equal(t, evt, h.header.Get("Webhook-Id"))

	ts, v1 := whSignature(t, h.header.Get("X-Webhook-Signature"))
	require.Len(t, v1, 1, "no rotation: one signature")
	assert.Equal(t, whHMAC(secret, ts, h.body), v1[0], "X-Webhook-Signature verifies with the endpoint's secret")
	assert.Equal(t, ts, h.header.Get("Webhook-Timestamp"))
	n, err := strconv.ParseInt(ts, 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Unix(), n, 5)
	assert.Equal(t, whStdHMAC(t, secret, evt, ts, h.body), h.header.Get("Webhook-Signature"),
		"the Standard Webhooks signature verifies with the same secret")

	d := w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusSucceeded)
	atts := whAttempts(t, d)
	require.Len(t, atts, 1)
	assert.Equal(t, float64(200), atts[0]["response_status"])
	assert.NotContains(t, atts[0], "error")
	assert.Equal(t, string(h.body), atts[0]["request_body"], "the log shows the body sent")
	hdrs, _ := atts[0]["request_headers"].(map[string]any)
	assert.Equal(t, h.header.Get("X-Webhook-Signature"), hdrs["X-Webhook-Signature"])
	assert.Equal(t, rc.URL+"/hooks/orders", d["url"])
}

func TestDeliveryRetries(t *testing.T) {
	// Each attempt: the receiver's status, the Retry-After header if any.
	type answer struct {
		status     int
		retryAfter string
	}
	cases := []struct {
		name     string
		answers  []answer // the last one repeats
		want     string
		wantErrs []string // per attempt; "" means no error
	}{
		{"500 twice then 200", []answer{{500, ""}, {500, ""}, {200, ""}}, webhook.StatusSucceeded,
			[]string{"500", "500", ""}},
		{"always 500", []answer{{500, ""}}, webhook.StatusFailed,
			[]string{"500", "500", "500", "500"}},
		{"204 is not success", []answer{{204, ""}, {200, ""}}, webhook.StatusSucceeded,
			[]string{"answer 200", ""}},
		{"201 is not success", []answer{{201, ""}}, webhook.StatusFailed,
			[]string{"answer 200", "answer 200", "answer 200", "answer 200"}},
		{"429 with Retry-After 0", []answer{{429, "0"}, {200, ""}}, webhook.StatusSucceeded,
			[]string{"429", ""}},
		{"503 then 200", []answer{{503, ""}, {200, ""}}, webhook.StatusSucceeded,
			[]string{"503", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := whStart(t, whFast()) // retry_schedule of 3: at most 4 attempts
			rc := whNewReceiver(t, false, func(h whHit, w http.ResponseWriter, r *http.Request) {
				a := tc.answers[min(h.n, len(tc.answers))-1]
				if a.retryAfter != "" {
					w.Header().Set("Retry-After", a.retryAfter)
				}
				w.WriteHeader(a.status)
				fmt.Fprintf(w, "answer %d", h.n)
			})
			ep, _ := w.whEndpoint(t, rc.URL)
			start := time.Now()
			evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
			d := w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), tc.want)
			atts := whAttempts(t, d)
			require.Len(t, atts, len(tc.wantErrs), "attempts: %v", atts)
			assert.EqualValues(t, len(tc.wantErrs), rc.count.Load(), "one request per attempt")
			assert.Equal(t, float64(len(tc.wantErrs)), d["attempt_count"])
			for i, a := range atts {
				want := tc.answers[min(i+1, len(tc.answers))-1].status
				assert.Equal(t, float64(want), a["response_status"], "attempt %d", i+1)
				wantBody := fmt.Sprintf("answer %d", i+1)
				if want == http.StatusNoContent {
					wantBody = "" // a 204 has no body
				}
				assert.Equal(t, wantBody, a["response_body"], "attempt %d", i+1)
				if tc.wantErrs[i] == "" {
					assert.NotContains(t, a, "error", "attempt %d", i+1)
				} else {
					assert.Contains(t, a["error"], tc.wantErrs[i], "attempt %d", i+1)
				}
				_, err := time.Parse(time.RFC3339Nano, a["at"].(string))
				assert.NoError(t, err, "attempt %d time", i+1)
			}
			// The retries followed the short schedule, not the defaults.
			assert.Less(t, time.Since(start), 3*time.Second)
			for i := range rc.count.Load() {
				h := rc.next(t, whWait)
				assert.Equal(t, evt, h.header.Get("Webhook-Id"), "request %d is the same event", i+1)
			}
		})
	}
}

// TestRetryIgnoresRetryAfter checks that retries follow retry_schedule
// alone (API.md §5): a receiver's Retry-After, shorter here, does not
// bring the next attempt forward (nor, longer, push it back).
func TestRetryIgnoresRetryAfter(t *testing.T) {
	const wait = 1500 * time.Millisecond
	conf := whFast()
	conf.Retry = []string{wait.String()}
	w := whStart(t, conf)
	rc := whNewReceiver(t, false, func(h whHit, w http.ResponseWriter, r *http.Request) {
		if h.n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	ep, _ := w.whEndpoint(t, rc.URL)
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	d := w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusSucceeded)
	atts := whAttempts(t, d)
	require.Len(t, atts, 2)
	var at [2]time.Time
	for i := range at {
		var err error
		at[i], err = time.Parse(time.RFC3339Nano, atts[i]["at"].(string))
		require.NoError(t, err)
	}
	if gap := at[1].Sub(at[0]); gap < wait {
		t.Errorf("second attempt %v after the first (Retry-After: 1); want at least the schedule's %v", gap, wait)
	}
}

// TestDeliveryObjectAsPublished checks that the object arrives as it was
// published (API.md §5.1: "body exactly"), compacted, and with "<", ">"
// and "&" as sent rather than escaped as Go's encoder would.
func TestDeliveryObjectAsPublished(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	w.whEndpoint(t, rc.URL)
	r := w.do(t, whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: whKeyA,
		body: `{"type": "order.status.updated", "data": {"object": {"id": "o<1>&2", "status": "pending", "note": "a\u0026b é"}}}`})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	h := rc.next(t, whWait)
	const want = `"data":{"object":{"id":"o<1>&2","status":"pending","note":"a\u0026b é"}}}`
	if !bytes.HasSuffix(h.body, []byte(want)) {
		t.Errorf("body %s; want it to end %s", h.body, want)
	}
}

func TestDeliveryTimeout(t *testing.T) {
	conf := whFast()
	conf.Retry = []string{"20ms"}
	w := whStart(t, conf) // timeout 300ms
	release := make(chan struct{})
	rc := whNewReceiver(t, false, whBlock(release))
	whReleaseAtEnd(t, release)
	atts := w.whFailedAttempts(t, rc.URL)
	require.Len(t, atts, 2)
	for i, a := range atts {
		assert.Contains(t, strings.ToLower(a["error"].(string)), "timed out", "attempt %d", i+1)
		assert.Equal(t, float64(0), a["response_status"], "attempt %d", i+1)
		ms := a["duration_ms"].(float64)
		assert.GreaterOrEqual(t, ms, float64(250), "attempt %d waited for the timeout", i+1)
		assert.Less(t, ms, float64(1500), "attempt %d is bounded by the timeout", i+1)
	}
}

func TestDeliveryRedirectNotFollowed(t *testing.T) {
	w := whStart(t, whFast())
	target := whNewReceiver(t, false, nil)
	rc := whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusFound)
	})
	// A followed redirect would happen inside the attempt, so once every
	// attempt is logged the target would have been reached.
	atts := w.whFailedAttempts(t, rc.URL)
	require.Len(t, atts, 4)
	for i, a := range atts {
		assert.Equal(t, float64(http.StatusFound), a["response_status"], "attempt %d", i+1)
		assert.Contains(t, a["error"], "redirect", "attempt %d", i+1)
	}
	assert.EqualValues(t, 4, rc.count.Load())
	assert.Zero(t, target.count.Load(), "the redirect target got nothing")
}

func TestDeliveryOnlyToEnabledSubscribers(t *testing.T) {
	w := whStart(t, whFast())
	on := whNewReceiver(t, false, nil)
	createdOff := whNewReceiver(t, false, nil)
	patchedOff := whNewReceiver(t, false, nil)
	otherType := whNewReceiver(t, false, nil)

	epOn, _ := w.whEndpoint(t, on.URL)
	epCreatedOff := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": createdOff.URL, "events": []string{webhook.EventOrderStatus}, "enabled": false})["id"].(string)
	epPatchedOff, _ := w.whEndpoint(t, patchedOff.URL)
	r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, epPatchedOff), key: whKeyA, body: map[string]any{"enabled": false}})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
	epOther := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": otherType.URL, "events": []string{webhook.EventTest}})["id"].(string)

	first := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	second := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "completed"), "")
	// Both events reached the subscribed endpoint, and since the others
	// would have been sent alongside, they got nothing.
	got := []string{on.next(t, whWait).header.Get("Webhook-Id"), on.next(t, whWait).header.Get("Webhook-Id")}
	assert.ElementsMatch(t, []string{first, second}, got)
	for _, evt := range []string{first, second} {
		w.whAwaitStatus(t, epOn, w.whDeliveryOf(t, epOn, evt), webhook.StatusSucceeded)
	}
	for name, c := range map[string]struct {
		rc *whReceiver
		ep string
	}{"created disabled": {createdOff, epCreatedOff}, "patched disabled": {patchedOff, epPatchedOff}, "other type": {otherType, epOther}} {
		assert.Zero(t, c.rc.count.Load(), "%s: receiver count", name)
		assert.Empty(t, w.whDeliveries(t, c.ep, ""), "%s: no delivery logged", name)
	}

	// Enabling again makes it receive the next event.
	r = w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, epPatchedOff), key: whKeyA, body: map[string]any{"enabled": true}})
	require.Equal(t, http.StatusOK, r.status)
	third := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "archived"), "")
	assert.Equal(t, third, patchedOff.next(t, whWait).header.Get("Webhook-Id"))
}

// TestNoRetryAfterDisabling: disabling an endpoint, or dropping the type
// from its events, fails the retries of deliveries already pending at
// once (API.md §5: only enabled endpoints subscribed to the type receive
// it). The test call still goes.
func TestNoRetryAfterDisabling(t *testing.T) {
	for _, patch := range []map[string]any{
		{"enabled": false},
		{"events": []string{webhook.EventTest}},
	} {
		t.Run(fmt.Sprint(patch), func(t *testing.T) {
			conf := whFast()
			conf.Retry = []string{"1h"} // so only the PATCH can end the delivery in time
			w := whStart(t, conf)
			rc := whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
			})
			ep, _ := w.whEndpoint(t, rc.URL)
			evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
			dlv := w.whDeliveryOf(t, ep, evt)
			rc.next(t, whWait)
			w.whAwait(t, ep, dlv, func(d map[string]any) bool { return d["attempt_count"] == float64(1) })
			r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, ep), key: whKeyA, body: patch})
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)

			r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlv, key: whKeyA})
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
			assert.Equal(t, webhook.StatusFailed, r.data()["status"], "the PATCH fails the pending retry")
			assert.Len(t, whAttempts(t, r.data()), 1, "no attempt after the PATCH")
			// /metrics agrees: one delivery failed, after one attempt retried.
			r = w.do(t, whReq{method: "GET", path: "/metrics"})
			require.Equal(t, http.StatusOK, r.status)
			for series, want := range map[string]float64{
				`deeplink_webhook_deliveries_total{outcome="failed"}`:    1,
				`deeplink_webhook_deliveries_total{outcome="succeeded"}`: 0,
				`deeplink_webhook_attempts_total{outcome="retried"}`:     1,
				`deeplink_webhook_attempts_total{outcome="failed"}`:      0,
			} {
				assert.Equal(t, want, metricValue(t, string(r.raw), series), series)
			}

			// The test call still goes: it names the endpoint explicitly.
			r = w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/test", key: whKeyA})
			require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
			assert.Equal(t, r.data()["id"], rc.next(t, whWait).header.Get("Webhook-Id"))
			assert.EqualValues(t, 2, rc.count.Load(), "the endpoint got no retry")
		})
	}
}

// TestNoAttemptOfQueuedDeliveriesAfterDisabling: deliveries waiting on
// their endpoint (at its in-flight limit) when it is disabled, a retry and
// a first attempt alike, are failed by the PATCH, and no request reaches
// the endpoint after it was answered; attempts under way finish.
func TestNoAttemptOfQueuedDeliveriesAfterDisabling(t *testing.T) {
	conf := whFast()
	conf.Timeout = "10s" // the blocked attempts end only when released
	w := whStart(t, conf)
	releaseFirst, release := make(chan struct{}), make(chan struct{})
	// Request 1 is the first attempt of the delivery that will retry: it
	// fails once released. Requests 2 to 5 fill the endpoint's places
	// until released. Any later one succeeds.
	rc := whNewReceiver(t, false, func(h whHit, w http.ResponseWriter, r *http.Request) {
		switch {
		case h.n == 1:
			whBlock(releaseFirst)(h, w, r)
			w.WriteHeader(http.StatusInternalServerError)
		case h.n <= 1+webhook.PerEndpointInFlight:
			whBlock(release)(h, w, r)
		}
	})
	// Released by the test, or at cleanup if it stops early (before the
	// receiver closes, which waits for its requests).
	unblockFirst, unblock := sync.OnceFunc(func() { close(releaseFirst) }), sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	t.Cleanup(unblockFirst)
	ep, _ := w.whEndpoint(t, rc.URL)

	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o0", "pending"), "")
	dlv := w.whDeliveryOf(t, ep, evt)
	require.Equal(t, evt, rc.next(t, whWait).header.Get("Webhook-Id"))
	var blockers []string
	for i := range webhook.PerEndpointInFlight {
		e := w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("o", i+1), "pending"), "")
		blockers = append(blockers, w.whDeliveryOf(t, ep, e))
	}
	for range webhook.PerEndpointInFlight - 1 {
		rc.next(t, whWait)
	}
	// The failed first attempt frees a place for the last blocker, so its
	// retry falls due with the endpoint at its limit and waits on it.
	unblockFirst()
	rc.next(t, whWait)
	w.whAwait(t, ep, dlv, func(d map[string]any) bool { return len(whAttempts(t, d)) == 1 }) // its failure written
	w.whAwaitWaiting(t, ep, dlv, 1)
	// A delivery published now waits on the endpoint for its first attempt.
	evtFirst := w.whPublish(t, whStoreA, whKeyA, whOrder("o-first", "pending"), "")
	dlvFirst := w.whDeliveryOf(t, ep, evtFirst)
	w.whAwaitWaiting(t, ep, dlvFirst, 0)

	r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, ep), key: whKeyA, body: map[string]any{"enabled": false}})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
	sent := rc.count.Load()
	require.EqualValues(t, 1+webhook.PerEndpointInFlight, sent)
	unblock()

	d := w.whAwait(t, ep, dlv, func(d map[string]any) bool { return d["status"] != webhook.StatusPending })
	assert.Equal(t, webhook.StatusFailed, d["status"], "the retry ended when the endpoint was disabled")
	assert.Len(t, whAttempts(t, d), 1, "no attempt after disabling")
	d = w.whAwaitStatus(t, ep, dlvFirst, webhook.StatusFailed)
	assert.Empty(t, whAttempts(t, d), "a first attempt still queued is not made either")
	for _, b := range blockers {
		w.whAwaitStatus(t, ep, b, webhook.StatusSucceeded) // the attempts under way at the PATCH end normally
	}
	assert.Equal(t, sent, rc.count.Load(), "no request reached the endpoint after the PATCH")
	require.Eventually(t, func() bool { // the queue is written after the record
		depth, err := w.app.srv.hooks.QueueDepth(t.Context())
		return err == nil && depth == 0
	}, whWait, time.Millisecond, "nothing is left queued")

	// Nothing is lost: a manual retry names the endpoint and still goes.
	r = w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlv + "/retry", key: whKeyA})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	assert.Equal(t, evt, rc.next(t, whWait).header.Get("Webhook-Id"))
	w.whAwaitStatus(t, ep, r.data()["id"].(string), webhook.StatusSucceeded)
}

// whDelivered publishes n order events, one after the other, each once
// the previous was delivered to ep, calling after(i) after the i-th (from
// 0) if not nil; it returns their deliveries' ids.
func (w *whApp) whDelivered(t *testing.T, ep string, n int, after func(i int)) []string {
	t.Helper()
	var dlvs []string
	for i := range n {
		evt := w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("o", i), "pending"), "")
		dlv := w.whDeliveryOf(t, ep, evt)
		w.whAwaitStatus(t, ep, dlv, webhook.StatusSucceeded)
		dlvs = append(dlvs, dlv)
		if after != nil {
			after(i)
		}
	}
	return dlvs
}

func TestDeliveryLogSize(t *testing.T) {
	conf := whFast()
	conf.LogSize = 3
	w := whStart(t, conf)
	rc := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, rc.URL)
	dlvs := w.whDelivered(t, ep, 5, nil)
	want := []string{dlvs[4], dlvs[3], dlvs[2]}
	require.Eventually(t, func() bool { // trimmed as each ends, just after its outcome is written
		return slices.Equal(want, whField(w.whDeliveries(t, ep, ""), "id"))
	}, whWait, time.Millisecond, "the newest 3 are kept")
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlvs[0], key: whKeyA})
	whRequireError(t, r, http.StatusNotFound, "not_found")
}

// TestDeliveryLogBytes sets an endpoint's log budget to about three
// deliveries whose answers are large: the log keeps the newest finished
// ones that fit, fewer than delivery_log_size; pending ones are not its.
func TestDeliveryLogBytes(t *testing.T) {
	w := whStart(t, whFast()) // delivery_log_size 1000
	big := strings.Repeat("x", 4<<10)
	ok := whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) })
	ep, _ := w.whEndpoint(t, ok.URL)
	hk := w.app.srv.hooks
	dlvs := w.whDelivered(t, ep, 6, func(i int) {
		if i == 0 {
			var one int64
			require.Eventually(t, func() bool { one = whLogHeld(t, w, ep); return one > 0 }, whWait, time.Millisecond, "the first delivery counted")
			hk.Budget.Log = 3*one + one/2
		}
	})
	want := []string{dlvs[5], dlvs[4], dlvs[3]}
	require.Eventually(t, func() bool { // trimmed as each ends, just after its outcome is written
		return slices.Equal(want, whField(w.whDeliveries(t, ep, ""), "id"))
	}, whWait, time.Millisecond, "the newest 3 fit")

	// Pending deliveries are not the log budget's: they stay.
	slow := whFast()
	slow.Retry = []string{"1h"} // refused once, then pending for the test's length
	w2 := whStart(t, slow)
	w2.app.srv.hooks.Budget.Log = 1
	dead, _ := w2.whEndpoint(t, "http://127.0.0.1:1/")
	evt := w2.whPublish(t, whStoreA, whKeyA, whOrder("o9", "pending"), "")
	assert.Equal(t, []string{w2.whDeliveryOf(t, dead, evt)}, whField(w2.whDeliveries(t, dead, ""), "id"), "the pending delivery")
}

func TestRotateSecretSignatures(t *testing.T) {
	cases := []struct {
		grace string
		both  bool
	}{
		{"24h", true},
		{"0s", false},
	}
	for _, tc := range cases {
		t.Run("grace "+tc.grace, func(t *testing.T) {
			conf := whFast()
			conf.Grace = tc.grace
			w := whStart(t, conf)
			rc := whNewReceiver(t, false, nil)
			ep, oldSecret := w.whEndpoint(t, rc.URL)

			r := w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/rotate-secret", key: whKeyA})
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
			assert.Equal(t, "no-store", r.header.Get("Cache-Control"), "Cache-Control of an answer with a secret")
			assert.Equal(t, ep, r.data()["id"], "the answer is the endpoint")
			answered, _ := r.data()["secret"].(string)
			r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/secret", key: whKeyA})
			newSecret, _ := r.data()["secret"].(string)
			require.True(t, strings.HasPrefix(newSecret, "whsec_"), "secret %q", newSecret)
			require.NotEqual(t, oldSecret, newSecret)
			assert.Equal(t, newSecret, answered, "the rotation's answer shows the new secret")

			w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
			h := rc.next(t, whWait)
			ts, v1 := whSignature(t, h.header.Get("X-Webhook-Signature"))
			if !tc.both {
				require.Len(t, v1, 1, "after the grace, the old secret signs nothing")
				assert.Equal(t, whHMAC(newSecret, ts, h.body), v1[0])
				assert.Equal(t, whStdHMAC(t, newSecret, h.header.Get("Webhook-Id"), ts, h.body), h.header.Get("Webhook-Signature"))
				return
			}
			require.Len(t, v1, 2, "during the grace, both secrets sign")
			assert.Equal(t, whHMAC(newSecret, ts, h.body), v1[0], "the first v1 is the new secret's")
			assert.Equal(t, whHMAC(oldSecret, ts, h.body), v1[1], "the second v1 is the old secret's")
			std := strings.Fields(h.header.Get("Webhook-Signature"))
			assert.ElementsMatch(t, []string{
				whStdHMAC(t, newSecret, h.header.Get("Webhook-Id"), ts, h.body),
				whStdHMAC(t, oldSecret, h.header.Get("Webhook-Id"), ts, h.body),
			}, std)
		})
	}
}

// TestRotateTwiceWithinGrace pins what the merchants' guide says: a
// rotation within another's grace ends the older secret's grace, and the
// requests carry the newest secret and the one it replaced.
func TestRotateTwiceWithinGrace(t *testing.T) {
	w := whStart(t, whFast()) // grace 24h
	rc := whNewReceiver(t, false, nil)
	ep, first := w.whEndpoint(t, rc.URL)
	var secrets []string
	for range 2 {
		r := w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/rotate-secret", key: whKeyA})
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
		secrets = append(secrets, r.data()["secret"].(string))
	}
	w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	h := rc.next(t, whWait)
	ts, v1 := whSignature(t, h.header.Get("X-Webhook-Signature"))
	assert.Equal(t, []string{whHMAC(secrets[1], ts, h.body), whHMAC(secrets[0], ts, h.body)}, v1,
		"v1: the newest secret's, then the one it replaced")
	assert.NotContains(t, v1, whHMAC(first, ts, h.body), "the first secret, replaced two rotations ago")
}

func TestDeliveryToLoopbackRefused(t *testing.T) {
	rc := whNewReceiver(t, true, nil)
	conf := whFast()
	conf.Insecure = false // the guard is on: 127.0.0.1 is not public
	conf.CAFile = whCAFile(t, rc.Server)
	w := whStart(t, conf)
	// API.md §5.1: the address is refused at send time, so creating the
	// endpoint succeeds.
	// By name: what it resolves to inside the service's network is not
	// shown to the merchant.
	atts := w.whFailedAttempts(t, strings.Replace(rc.URL, "127.0.0.1", "localhost", 1))
	require.Len(t, atts, 4)
	for i, a := range atts {
		assert.Contains(t, a["error"], egress.ErrNotPublic.Error(), "attempt %d", i+1)
		assert.NotContains(t, a["error"], "127.0.0.1", "attempt %d: the address localhost resolved to", i+1)
		assert.Equal(t, float64(0), a["response_status"], "attempt %d", i+1)
	}
	assert.Zero(t, rc.count.Load(), "the receiver got nothing")
}

func TestPendingDeliverySurvivesRestart(t *testing.T) {
	cases := []struct {
		name  string
		retry []string
		// before answers the receiver's requests until the restart.
		before func(release <-chan struct{}) whRespond
		// recorded is how many attempts the first app logs: a retry
		// waiting at shutdown has one; an attempt cut off by shutdown is
		// not logged and is sent again after the restart.
		recorded int
	}{
		{"waiting for a retry", []string{"1s", "1s"}, func(<-chan struct{}) whRespond {
			return func(_ whHit, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }
		}, 1},
		{"attempt under way", []string{"20ms"}, whBlock, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var restarted atomic.Bool
			release := make(chan struct{})
			before := tc.before(release)
			rc := whNewReceiver(t, false, func(h whHit, w http.ResponseWriter, r *http.Request) {
				if restarted.Load() {
					w.WriteHeader(http.StatusOK)
					return
				}
				before(h, w, r)
			})
			whReleaseAtEnd(t, release)
			conf := whFast()
			conf.DataDir = t.TempDir()
			conf.Timeout = "10s" // an attempt under way ends only by the shutdown
			conf.Retry = tc.retry
			w1 := whStart(t, conf)
			ep, secret := w1.whEndpoint(t, rc.URL)
			evt := w1.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "restart-key")
			dlv := w1.whDeliveryOf(t, ep, evt)
			rc.next(t, whWait)
			w1.whAwait(t, ep, dlv, func(d map[string]any) bool {
				return d["status"] == webhook.StatusPending && d["attempt_count"] == float64(tc.recorded)
			})
			w1.close()
			restarted.Store(true)

			w2 := whStart(t, conf)
			r := w2.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/secret", key: whKeyA})
			require.Equal(t, http.StatusOK, r.status, "the endpoint survived: %s", r.raw)
			assert.Equal(t, secret, r.data()["secret"], "and its secret")
			assert.Equal(t, evt, w2.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "restart-key"),
				"and the idempotency key")

			h := rc.next(t, whWait)
			assert.Equal(t, evt, h.header.Get("Webhook-Id"))
			ts, v1 := whSignature(t, h.header.Get("X-Webhook-Signature"))
			require.Len(t, v1, 1)
			assert.Equal(t, whHMAC(secret, ts, h.body), v1[0])

			d := w2.whAwaitStatus(t, ep, dlv, webhook.StatusSucceeded)
			atts := whAttempts(t, d)
			require.Len(t, atts, tc.recorded+1)
			if tc.recorded > 0 {
				assert.Equal(t, float64(500), atts[0]["response_status"], "the attempt before the restart is kept")
			}
			assert.Equal(t, float64(200), atts[len(atts)-1]["response_status"])
			assert.Equal(t, []string{dlv}, whField(w2.whDeliveries(t, ep, ""), "id"), "one delivery, the same one")
		})
	}
}

// TestSlowEndpointsDoNotDelayAnother holds slow endpoints at their
// in-flight limit, with more deliveries waiting behind them, then wants a
// delivery to another endpoint at once: with one slow endpoint, and with
// every endpoint the two stores may have slow but the last (more attempts
// under way than the smallest pool has workers).
func TestSlowEndpointsDoNotDelayAnother(t *testing.T) {
	for _, tt := range []struct {
		name         string
		slowA, slowB int // slow endpoints of stores A and B
	}{
		{"one slow endpoint of another store", 1, 0},
		{"every other endpoint of both stores", webhook.MaxEndpointsPerStore, webhook.MaxEndpointsPerStore - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conf := whFast()
			conf.Timeout = "10s" // the slow receiver holds its requests until the end
			w := whStart(t, conf)
			release := make(chan struct{})
			slow := whNewReceiver(t, false, whBlock(release))
			whReleaseAtEnd(t, release)
			events := []string{webhook.EventOrderStatus}
			for range tt.slowA {
				w.whEndpoint(t, slow.URL)
			}
			for range tt.slowB {
				w.whCreate(t, whStoreB, whKeyB, map[string]any{"url": slow.URL, "events": events})
			}
			for i := range 2 * webhook.PerEndpointInFlight { // half of them wait on their endpoint
				w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("a", i), "pending"), "")
				w.whPublish(t, whStoreB, whKeyB, whOrder(fmt.Sprint("b", i), "pending"), "")
			}
			held := (tt.slowA + tt.slowB) * webhook.PerEndpointInFlight
			for range held {
				slow.next(t, whWait) // every slow endpoint reaches its limit, all at once
			}

			w.requirePromptDelivery(t, "the last endpoint waited for the slow ones")
			assert.EqualValues(t, held, slow.count.Load(), "the slow endpoints hold at most their in-flight limit each")
		})
	}
}

// TestDeletedEndpointGivesBackItsWorkers deletes slow endpoints with
// attempts under way, and makes new ones, three times over: each time the
// old attempts are cancelled, so store A never holds more than its
// endpoints' limits and store B's delivery still goes at once.
func TestDeletedEndpointGivesBackItsWorkers(t *testing.T) {
	conf := whFast()
	conf.Timeout = "10s"
	w := whStart(t, conf)
	release := make(chan struct{})
	slow := whNewReceiver(t, false, whBlock(release))
	whReleaseAtEnd(t, release)
	perCycle := webhook.MaxEndpointsPerStore * webhook.PerEndpointInFlight
	require.Greater(t, 3*perCycle, webhook.DispatchWorkers(len(w.cfg.Stores)), "the cycles need more attempts than the pool has workers")
	for cycle := range 3 {
		var ids []string
		for range webhook.MaxEndpointsPerStore {
			id, _ := w.whEndpoint(t, slow.URL)
			ids = append(ids, id)
		}
		for i := range webhook.PerEndpointInFlight {
			w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("a", cycle, i), "pending"), "")
		}
		for range perCycle {
			slow.next(t, whWait) // every one under way at once
		}
		for _, id := range ids {
			r := w.do(t, whReq{method: http.MethodDelete, path: whEndpointPath(whStoreA, id), key: whKeyA})
			require.Equal(t, http.StatusNoContent, r.status, "delete: %s", r.raw)
		}
	}
	w.requirePromptDelivery(t, "store B's endpoint waited behind store A's deleted ones")
}

// requirePromptDelivery gives store B a new endpoint at a receiver that
// answers at once, publishes an event and wants it there within 2 s, or
// fails with why: whatever other endpoints hold, none holds it back.
func (w *whApp) requirePromptDelivery(t *testing.T, why string) {
	t.Helper()
	fast := whNewReceiver(t, false, nil)
	w.whCreate(t, whStoreB, whKeyB, map[string]any{"url": fast.URL, "events": []string{webhook.EventOrderStatus}})
	evt := w.whPublish(t, whStoreB, whKeyB, whOrder("b-last", "completed"), "")
	select {
	case h := <-fast.hits:
		assert.Equal(t, evt, h.header.Get("Webhook-Id"))
	case <-time.After(2 * time.Second):
		t.Fatal(why)
	}
}

func TestDispatchWorkers(t *testing.T) {
	for _, tt := range []struct{ stores, want int }{
		{0, webhook.MinDispatchWorkers},
		{1, webhook.MinDispatchWorkers}, // 21 would do
		{2, 41},
		{10, 201},
		{51, 1021},
		{52, webhook.MaxDispatchWorkers},
		{100_000, webhook.MaxDispatchWorkers},
	} {
		if got := webhook.DispatchWorkers(tt.stores); got != tt.want {
			t.Errorf("dispatchWorkers(%d) = %d; want %d", tt.stores, got, tt.want)
		}
	}
}

// TestDeliveryAnswerCutShort checks answers that fail although they may
// begin well (API.md §5: only 200 is success; a timeout is a failure and
// is retried): a 200 whose body then stalls past the timeout, and a
// header over egress.MaxResponseHeader, which is not read whole.
func TestDeliveryAnswerCutShort(t *testing.T) {
	cases := []struct {
		name       string
		respond    whRespond
		wantStatus float64
		wantError  string
	}{
		{"body stalls after 200", func(_ whHit, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, 200, "reading the response"},
		{"header over the limit", func(_ whHit, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Junk", strings.Repeat("x", egress.MaxResponseHeader))
			w.WriteHeader(http.StatusOK)
		}, 0, "exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := whStart(t, whFast())
			rc := whNewReceiver(t, false, tc.respond)
			atts := w.whFailedAttempts(t, rc.URL)
			require.Len(t, atts, 1+len(whFast().Retry), "every attempt fails and is retried")
			for i, a := range atts {
				assert.Equal(t, tc.wantStatus, a["response_status"], "attempt %d", i)
				assert.Contains(t, a["error"], tc.wantError, "attempt %d", i)
			}
		})
	}
}

func TestDeliveryResponseBodyCapped(t *testing.T) {
	chunk := []byte(strings.Repeat("x", 32<<10))
	cases := []struct {
		name    string
		respond whRespond
	}{
		{"huge", func(_ whHit, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			for range 32 { // 1 MiB
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}},
		{"never ends", func(_ whHit, w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := whFast()
			conf.Timeout = "1s"
			w := whStart(t, conf)
			rc := whNewReceiver(t, false, tc.respond)
			ep, _ := w.whEndpoint(t, rc.URL)
			evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
			d := w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusSucceeded)
			atts := whAttempts(t, d)
			require.Len(t, atts, 1)
			body := atts[0]["response_body"].(string)
			assert.Len(t, body, egress.MaxResponseBody, "the first 4 KiB of the body are kept")
			assert.Equal(t, strings.Repeat("x", egress.MaxResponseBody), body)
			assert.Less(t, atts[0]["duration_ms"], float64(1000), "the attempt ends within the timeout")
		})
	}
}

// TestAttemptURLIsWhereItWent moves an endpoint while its delivery is
// being retried: each attempt in the log shows the URL it went to, not
// the endpoint's URL at the time of reading.
func TestAttemptURLIsWhereItWent(t *testing.T) {
	conf := whFast()
	conf.Retry = []string{"500ms", "500ms", "500ms"} // time for the PATCH after the first
	w := whStart(t, conf)
	failing := whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	working := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, failing.URL)
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	failing.next(t, whWait) // the first attempt was made, and failed
	r := w.do(t, whReq{method: http.MethodPatch, path: whEndpointPath(whStoreA, ep), key: whKeyA, body: map[string]any{"url": working.URL}})
	require.Equal(t, http.StatusOK, r.status, "PATCH url: %s", r.body)
	d := w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusSucceeded)
	assert.Equal(t, working.URL, d["url"], "the delivery's url: the endpoint's now")
	atts := whAttempts(t, d)
	require.GreaterOrEqual(t, len(atts), 2, "attempts: %v", atts)
	for i, a := range atts {
		want := failing.URL
		if a["response_status"] == float64(http.StatusOK) {
			want = working.URL
		}
		assert.Equal(t, want, a["url"], "attempt %d (status %v)", i+1, a["response_status"])
	}
}

// TestFailureReason checks that a failed delivery says why, in the log's
// list and in its detail, however it failed: some fail without an attempt.
func TestFailureReason(t *testing.T) {
	cases := []struct {
		name   string
		answer int            // the receiver's status; 0: a dead address
		change map[string]any // a PATCH of the endpoint once published
		want   string         // failure_reason; "" for none
		status string         // the delivery's end
	}{
		{"retries used up", http.StatusInternalServerError, nil, webhook.ReasonRetriesUsedUp, webhook.StatusFailed},
		{"disabled", 0, map[string]any{"enabled": false}, webhook.ReasonDisabled, webhook.StatusFailed},
		{"event type dropped", 0, map[string]any{"events": []string{webhook.EventTest}}, webhook.ReasonUnsubscribed, webhook.StatusFailed},
		{"succeeded", http.StatusOK, nil, "", webhook.StatusSucceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf := whFast()
			url := "http://127.0.0.1:1/"
			if tc.answer != 0 {
				url = whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.answer) }).URL
			} else {
				conf.Retry = []string{"1h"} // pending until the change
			}
			w := whStart(t, conf)
			ep, _ := w.whEndpoint(t, url)
			dlv := w.whDeliveryOf(t, ep, w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), ""))
			if tc.change != nil {
				r := w.do(t, whReq{method: http.MethodPatch, path: whEndpointPath(whStoreA, ep), key: whKeyA, body: tc.change})
				require.Equal(t, http.StatusOK, r.status, "PATCH: %s", r.raw)
			}
			d := w.whAwaitStatus(t, ep, dlv, tc.status)
			listed := w.whDeliveries(t, ep, "")[0]
			if tc.want == "" {
				assert.NotContains(t, d, "failure_reason")
				assert.NotContains(t, listed, "failure_reason")
				return
			}
			assert.Equal(t, tc.want, d["failure_reason"], "detail")
			assert.Equal(t, tc.want, listed["failure_reason"], "list")
		})
	}
}
