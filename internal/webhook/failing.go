package webhook

// An endpoint's failure window: from its first failed attempt since the
// last that succeeded, until the next success. Once the window has been
// open webhooks.disable_after, the endpoint is disabled with reason
// failing (API.md §2, §5), as a PATCH would disable it: what is queued
// for it fails at once, and nothing more is sent to it until a request
// enables it again, which also closes the window.
//
// The window is kept with the endpoint (FailingSince), so that a restart
// neither forgets nor restarts it. It is moved where attempt outcomes
// are written (records.noteAttempt) and checked by the tick, since an
// endpoint whose last delivery has run out of retries gets no more
// outcomes.

// Values of endpoint.DisabledReason.
const (
	DisabledManual  = "manual"  // by a request: PATCH, or creation with enabled false
	DisabledFailing = "failing" // by moveWindow
)
