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
// neither forgets nor restarts it. It is moved where attempt outcomes
// are written (records.moveWindowOf) and checked by Hooks.Tick, since an
// endpoint whose last delivery has run out of retries gets no more
// outcomes.

// Values of Endpoint.DisabledReason.
const (
	DisabledManual  = "manual"  // by a request: PATCH, or creation with enabled false
	DisabledFailing = "failing" // by moveWindow
)

// moveWindow moves e's failure window on by an attempt's outcome, and
// disables e once it has been open after; it reports whether it did.
func moveWindow(e *Endpoint, ok bool, now time.Time, after time.Duration) bool {
	switch {
	case ok:
		e.FailingSince = 0
		return false
	case e.FailingSince == 0:
		e.FailingSince = now.UnixNano()
	}
	if after <= 0 || !e.Enabled || now.Sub(time.Unix(0, e.FailingSince)) < after {
		return false
	}
	e.Enabled, e.DisabledReason, e.UpdatedAt = false, DisabledFailing, now.Unix()
	return true
}
