package webhook

import "time"

// An endpoint's failure window: from its first failed attempt since the
// last that succeeded, until the next success. Once the window has been
// open webhooks.disable_after, the endpoint is disabled with reason
// failing (API.md §2, §5), as a PATCH would disable it: what is queued
// for it fails at once, and nothing more is sent to it until a request
// enables it again, which also closes the window.
//
// The window is kept with the endpoint (FailingSince), so that a restart
// neither forgets nor restarts it. It is checked where attempt outcomes
// are recorded (recordLocked) and by the tick, since an endpoint whose
// last delivery has run out of retries gets no more outcomes.

// Values of endpoint.DisabledReason.
const (
	DisabledManual  = "manual"  // by a request: PATCH, or creation with enabled false
	DisabledFailing = "failing" // by checkFailingLocked
)

// noteAttemptLocked moves e's failure window on by the outcome of one of
// its attempts, ok when it succeeded, and disables e if the window has now
// been open long enough (checkFailingLocked). hk.Mu must be held.
func (hk *Hooks) NoteAttemptLocked(e *Endpoint, ok bool) {
	now := hk.Now()
	switch {
	case ok && e.FailingSince != 0:
		e.FailingSince = 0
		hk.TouchLocked(KindEndpoint, e.ID)
	case !ok && e.FailingSince == 0:
		e.FailingSince = now.UnixNano()
		hk.TouchLocked(KindEndpoint, e.ID)
	}
	hk.checkFailingLocked(e, now)
}

// checkFailingLocked disables e, with reason failing, when at now its
// failure window has been open webhooks.disable_after or longer (never
// when that is 0): its queued deliveries fail at once (dropQueuedLocked),
// and one line at WARN says so. hk.Mu must be held.
func (hk *Hooks) checkFailingLocked(e *Endpoint, now time.Time) {
	after := hk.Cfg.Webhooks.DisableAfter.D()
	if after <= 0 || !e.Enabled || e.FailingSince == 0 {
		return
	}
	since := time.Unix(0, e.FailingSince)
	if now.Sub(since) < after {
		return
	}
	e.Enabled, e.DisabledReason, e.UpdatedAt = false, DisabledFailing, now.Unix()
	hk.TouchLocked(KindEndpoint, e.ID)
	hk.DropQueuedLocked(e, DropAll)
	hk.Log.Warn("webhooks: endpoint disabled: every attempt failed for webhooks.disable_after; a PATCH with enabled true turns it back on",
		"store", e.StoreID, "endpoint", e.ID, "failing_since", since.UTC().Format(time.RFC3339), "disable_after", after.String())
}
