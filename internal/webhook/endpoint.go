package webhook

import (
	"cmp"
	"slices"
	"time"
)

// Endpoint is a merchant's webhook URL. Secrets leave the service only
// through create, rotate and /secret.
type Endpoint struct {
	ID          string   `json:"id"`
	StoreID     string   `json:"store_id"`
	URL         string   `json:"url"`
	Description string   `json:"description"`
	Events      []string `json:"events"`
	Enabled     bool     `json:"enabled"`
	CreatedAt   int64    `json:"created_at"`
	UpdatedAt   int64    `json:"updated_at"`
	// CreatedNS is when e was made, in unix nanoseconds: its place among
	// its store's endpoints, which created_at (seconds) cannot give those
	// made within one second; 0 in records saved before it was kept.
	CreatedNS int64 `json:"created_ns,omitempty"`

	// Why a disabled endpoint is: DisabledManual or DisabledFailing; ""
	// while enabled, and in records saved before it was kept (shown as
	// manual: only a request could disable an endpoint then).
	DisabledReason string `json:"disabled_reason,omitempty"`
	// FailingSince opens e's failure window (below): the time of the
	// first failed attempt since the last that succeeded, in unix
	// nanoseconds of Hooks.Now; 0 when there is none.
	FailingSince int64 `json:"failing_since,omitempty"`

	Secret       string `json:"secret"`
	OldSecret    string `json:"old_secret,omitempty"`     // still signs until OldSecretEnd (its rotation grace)
	OldSecretEnd int64  `json:"old_secret_end,omitempty"` // unix seconds

	NextSeq uint64 `json:"next_seq"` // as earlier builds kept it, which numbered deliveries by it; kept as read
}

// view is the endpoint as docs/api.md shows it: no secret, and
// disabled_reason null while enabled (API.md §5).
func (e *Endpoint) view() map[string]any {
	var reason any
	if !e.Enabled {
		reason = cmp.Or(e.DisabledReason, DisabledManual)
	}
	return map[string]any{
		"id": e.ID, "url": e.URL, "description": e.Description, "events": e.Events,
		"enabled": e.Enabled, "disabled_reason": reason, "created_at": e.CreatedAt, "updated_at": e.UpdatedAt,
	}
}

// viewWithSecret is view with the secret: what create and rotate answer.
func (e *Endpoint) viewWithSecret() map[string]any {
	v := e.view()
	v["secret"] = e.Secret
	return v
}

func (e *Endpoint) subscribed(typ string) bool { return slices.Contains(e.Events, typ) }

// clone returns a copy of e that shares nothing its holder may change.
func (e *Endpoint) clone() *Endpoint {
	c := *e
	c.Events = slices.Clone(e.Events)
	return &c
}

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

// moveWindow moves e's failure window on by an attempt's outcome at now,
// and disables e once it has been open after (never when after is 0); it
// reports whether it did.
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
