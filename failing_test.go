package main

import (
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of disabled_reason and webhooks.disable_after (API.md §2, §5)
// through the real mux. Time passes on the app's test clock (advance),
// never by waiting.

// whFlaky is a receiver that answers 500 while down, 200 otherwise. The
// request after a whSend that moves the clock on moves it first, so
// that its outcome is recorded after, whether or not the app's tick
// comes between.
type whFlaky struct {
	*whReceiver
	down atomic.Bool
	skip atomic.Int64 // what the next request moves the clock on by
	app  atomic.Pointer[app]
}

func whNewFlaky(t *testing.T) *whFlaky {
	t.Helper()
	fl := &whFlaky{}
	fl.whReceiver = whNewReceiver(t, false, func(_ whHit, w http.ResponseWriter, _ *http.Request) {
		if d := fl.skip.Swap(0); d != 0 {
			advance(fl.app.Load(), time.Duration(d))
		}
		if fl.down.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	return fl
}

// whSend publishes an order event to store A, answered by fl as step s
// says, and waits until its delivery to ep has ended; it returns the
// delivery's detail.
func (w *whApp) whSend(t *testing.T, ep string, fl *whFlaky, s whStep) map[string]any {
	t.Helper()
	fl.app.Store(w.app)
	fl.down.Store(!s.ok)
	fl.skip.Store(int64(s.advance))
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	return w.whAwait(t, ep, w.whDeliveryOf(t, ep, evt), func(d map[string]any) bool { return d["status"] != webhook.StatusPending })
}

// whGetEndpoint returns store A's endpoint ep as the API shows it.
func (w *whApp) whGetEndpoint(t *testing.T, ep string) map[string]any {
	t.Helper()
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep), key: whKeyA})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
	return r.data()
}

// whPatch patches store A's endpoint ep and returns it as the answer shows it.
func (w *whApp) whPatch(t *testing.T, ep string, patch map[string]any) map[string]any {
	t.Helper()
	r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, ep), key: whKeyA, body: patch})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
	return r.data()
}

// whDisabledLines returns the log lines that say an endpoint was disabled.
func whDisabledLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(log) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "webhooks: endpoint disabled") {
			out = append(out, m)
		}
	}
	return out
}

// whStep is one event sent by whSend: the clock moved on by advance
// before its first attempt is answered, with 500, or 200 when ok.
type whStep struct {
	advance time.Duration
	ok      bool
}

var (
	whFail = whStep{}
	whOK   = whStep{ok: true}
)

// whAfter is s with the clock moved on by d first.
func whAfter(d time.Duration, s whStep) whStep { s.advance = d; return s }

// TestDisableAfter: an endpoint whose attempts have all failed for
// disable_after is disabled with reason failing at its next failure; a
// success closes the window, and the next failure opens a new one; "0s"
// never disables; the default is 120h.
func TestDisableAfter(t *testing.T) {
	for _, tt := range []struct {
		name         string
		disableAfter string
		steps        []whStep
		want         any // disabled_reason at the end
	}{
		{"failing for disable_after", "1h", []whStep{whFail, whAfter(time.Hour, whFail)}, webhook.DisabledFailing},
		{"failing for less", "1h", []whStep{whFail, whAfter(59*time.Minute, whFail)}, nil},
		{"a success closes the window", "1h", []whStep{whFail, whAfter(40*time.Minute, whOK), whAfter(40*time.Minute, whFail)}, nil},
		{"the window opens at the first failure after a success", "1h",
			[]whStep{whFail, whOK, whAfter(40*time.Minute, whFail), whAfter(59*time.Minute, whFail)}, nil},
		{"a new window runs its full length", "1h",
			[]whStep{whFail, whOK, whAfter(40*time.Minute, whFail), whAfter(time.Hour, whFail)}, webhook.DisabledFailing},
		{"0s never disables", "0s", []whStep{whFail, whAfter(10000*time.Hour, whFail)}, nil},
		{"the default is 120h", "", []whStep{whFail, whAfter(120*time.Hour, whFail)}, webhook.DisabledFailing},
		{"not before 120h by default", "", []whStep{whFail, whAfter(119*time.Hour, whFail)}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs lockedBuffer
			conf := whFast()
			conf.DisableAfter, conf.Log = tt.disableAfter, &logs
			w := whStart(t, conf)
			rc := whNewFlaky(t)
			ep, secret := w.whEndpoint(t, rc.URL)
			start := time.Now()
			var last map[string]any
			var offset, opened time.Duration // the clock's, and when the last window opened
			closed := true
			for _, s := range tt.steps {
				offset += s.advance
				if !s.ok && closed {
					opened = offset
				}
				closed = s.ok
				last = w.whSend(t, ep, rc, s)
			}
			got := w.whGetEndpoint(t, ep)
			if got["disabled_reason"] != tt.want || got["enabled"] != (tt.want == nil) {
				t.Fatalf("endpoint after %v = enabled %v, disabled_reason %v; want %v", tt.steps, got["enabled"], got["disabled_reason"], tt.want)
			}
			lines := whDisabledLines(t, logs.String())
			if tt.want == nil {
				assert.Empty(t, lines, "nothing logged")
				return
			}
			// Disabled at the last failure, that delivery is failed
			// without a retry, and nothing more is sent.
			assert.Len(t, whAttempts(t, last), 1, "the last delivery: %v", last)
			assert.Equal(t, webhook.ReasonDisabled, last["failure_reason"])
			sent := rc.count.Load()
			evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o2", "pending"), "")
			for _, d := range w.whDeliveries(t, ep, "") {
				assert.NotEqual(t, evt, d["event_id"], "an event published after is not queued for it")
			}
			assert.Equal(t, sent, rc.count.Load())

			require.Eventually(t, func() bool { lines = whDisabledLines(t, logs.String()); return len(lines) == 1 }, whWait, 10*time.Millisecond,
				"one line (written once the endpoint is disabled): %s", logs.String())
			l := lines[0]
			assert.Equal(t, "WARN", l["level"])
			assert.Equal(t, whStoreA, l["store"])
			assert.Equal(t, ep, l["endpoint"])
			since, err := time.Parse(time.RFC3339, l["failing_since"].(string))
			require.NoError(t, err, "failing_since")
			if from := start.Add(opened); since.Before(from.Truncate(time.Second)) || since.After(from.Add(whWait)) {
				t.Errorf("failing_since = %v; want the window's first failure, just after %v", since, from)
			}
			assert.NotContains(t, logs.String(), secret)
			assert.NotContains(t, logs.String(), whKeyA)
		})
	}
}

// TestDisableAfterWithoutAttempts: an endpoint whose last delivery has
// run out of retries gets no more outcomes; the tick disables it once its
// window has been open disable_after.
func TestDisableAfterWithoutAttempts(t *testing.T) {
	var logs lockedBuffer
	conf := whFast()
	conf.DisableAfter, conf.Log = "1h", &logs
	w := whStart(t, conf)
	rc := whNewFlaky(t)
	ep, _ := w.whEndpoint(t, rc.URL)
	w.whSend(t, ep, rc, whFail)
	advance(w.app, time.Hour)
	require.Eventually(t, func() bool {
		r, err := w.try(whReq{method: "GET", path: whEndpointPath(whStoreA, ep), key: whKeyA})
		return err == nil && r.data()["disabled_reason"] == webhook.DisabledFailing
	}, whWait, 10*time.Millisecond, "the tick disables it")
	require.Eventually(t, func() bool { return len(whDisabledLines(t, logs.String())) == 1 }, whWait, 10*time.Millisecond,
		"one line says so (written once the endpoint is): %s", logs.String())
}

// TestDisabledReason: what disabled_reason shows through creation and
// PATCH: null while enabled, manual once a request disabled the endpoint,
// failing once disable_after did; a PATCH that enables clears it, and one
// that leaves the endpoint disabled keeps it.
func TestDisabledReason(t *testing.T) {
	conf := whFast()
	conf.DisableAfter = "1h"
	w := whStart(t, conf)
	rc := whNewFlaky(t)
	created := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": rc.URL, "events": []string{webhook.EventOrderStatus}, "enabled": false})
	assert.Equal(t, webhook.DisabledManual, created["disabled_reason"], "created with enabled false")
	enabled := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": rc.URL, "events": []string{webhook.EventOrderStatus}})
	assert.Contains(t, enabled, "disabled_reason", "null is shown, not left out")
	assert.Nil(t, enabled["disabled_reason"], "created enabled")
	w.do(t, whReq{method: "DELETE", path: whEndpointPath(whStoreA, enabled["id"].(string)), key: whKeyA})
	ep := created["id"].(string)

	// failing makes the endpoint fail for disable_after.
	failing := func(t *testing.T) {
		w.whSend(t, ep, rc, whFail)
		w.whSend(t, ep, rc, whAfter(time.Hour, whFail))
		require.Equal(t, webhook.DisabledFailing, w.whGetEndpoint(t, ep)["disabled_reason"])
	}
	for _, tt := range []struct {
		name   string
		before func(t *testing.T)
		patch  map[string]any
		want   any
	}{
		{"enable", nil, map[string]any{"enabled": true}, nil},
		{"disable", nil, map[string]any{"enabled": false}, webhook.DisabledManual},
		{"another field of a disabled one", nil, map[string]any{"description": "d"}, webhook.DisabledManual},
		{"enable again", nil, map[string]any{"enabled": true}, nil},
		{"another field of an enabled one", nil, map[string]any{"description": "e"}, nil},
		{"disable one disabled as failing", failing, map[string]any{"enabled": false}, webhook.DisabledFailing},
		{"another field of one disabled as failing", nil, map[string]any{"description": "f"}, webhook.DisabledFailing},
		{"enable one disabled as failing", nil, map[string]any{"enabled": true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			got := w.whPatch(t, ep, tt.patch)
			if got["disabled_reason"] != tt.want {
				t.Errorf("PATCH(%v) disabled_reason = %v; want %v", tt.patch, got["disabled_reason"], tt.want)
			}
			assert.Contains(t, got, "disabled_reason", "null is shown, not left out")
			assert.Equal(t, tt.want, w.whGetEndpoint(t, ep)["disabled_reason"], "the change is kept")
		})
	}
	// Enabled again, the endpoint starts a new window: a failure now,
	// an hour after the first of the old one, does not disable it.
	w.whSend(t, ep, rc, whFail)
	assert.Nil(t, w.whGetEndpoint(t, ep)["disabled_reason"])
}

// TestDisabledReasonSurvivesRestart: the reason, and an open failure
// window, are kept with the endpoint.
func TestDisabledReasonSurvivesRestart(t *testing.T) {
	conf := whFast()
	conf.DataDir, conf.DisableAfter = t.TempDir(), "1h"
	rc := whNewFlaky(t)
	w1 := whStart(t, conf)
	failing, _ := w1.whEndpoint(t, rc.URL)
	w1.whSend(t, failing, rc, whFail)
	w1.whSend(t, failing, rc, whAfter(time.Hour, whFail))
	manual, _ := w1.whEndpoint(t, rc.URL)
	w1.whPatch(t, manual, map[string]any{"enabled": false})
	open, _ := w1.whEndpoint(t, rc.URL)
	w1.whSend(t, open, rc, whFail)
	w1.close()

	w2 := whStart(t, conf)
	for _, tt := range []struct {
		ep   string
		want any
	}{{failing, webhook.DisabledFailing}, {manual, webhook.DisabledManual}, {open, nil}} {
		if got := w2.whGetEndpoint(t, tt.ep)["disabled_reason"]; got != tt.want {
			t.Errorf("disabled_reason of %s after a restart = %v; want %v", tt.ep, got, tt.want)
		}
	}
	// w1's clock ran an hour ahead when open's window opened: two hours
	// on w2's is an hour after.
	w2.whSend(t, open, rc, whAfter(2*time.Hour, whFail))
	assert.Equal(t, webhook.DisabledFailing, w2.whGetEndpoint(t, open)["disabled_reason"], "the window opened before the restart")
}
