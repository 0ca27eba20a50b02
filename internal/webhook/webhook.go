// Package webhook is the service's webhook engine: the endpoints, events
// and deliveries of every store and their delivery log, kept in a
// store.Store as the state of record and read and written per request
// (records.go); the delivery queue in the same store (queue.go); and the
// sender that claims due deliveries from it, signs and sends them
// (sender.go). Every process on one store (replicas on Redis, the edge
// host and its module) serves every request and, but the edge module,
// sends: none holds a copy of the state that others must keep in step.
// The root package serves its HTTP routes and dashboard pages through
// the operations of api.go; it is a package of its own so that the edge
// host (wasm/) can run it natively.
package webhook

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/store"
)

const (
	MaxEndpointsPerStore = 5
	EventOrderStatus     = "order.status.updated"
	EventTest            = "webhook.test"
	IdempotencyTTL       = 24 * time.Hour

	// A store's undelivered webhooks stay in memory, and in the saved
	// state, until delivered or given up (the retry schedule: about 45 h
	// by default), so a store publishing to an endpoint that never
	// answers would pile them up without end. Each pending delivery
	// counts what it holds (NewCost: its event's bytes and
	// pendingOverhead) against the store's pendingBudget; past it, what
	// would add one answers 503 (over its memory budget) until
	// deliveries end.
	PendingBudget   = 64 << 20
	pendingOverhead = 512
	// idemBudget bounds the Idempotency-Keys a store has remembered (each
	// for idempotencyTTL); past it, a publish with a new key answers 503.
	idemBudget = 100_000
	// logBudget bounds what an endpoint's finished deliveries hold (their
	// event, and each attempt's answer of up to 4 KiB): the log keeps
	// delivery_log_size of them, or fewer, the oldest going first, when
	// they would hold more. Without it a store's log could take about
	// 0.5 GB: 5 endpoints × 1000 deliveries × 9 attempts × 4 KiB, and
	// events of up to 64 KiB. Pending deliveries are not dropped for it.
	logBudget = 16 << 20
)

// endpoint is a merchant's webhook URL. Secrets leave the service only
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

	// Why a disabled endpoint is: disabledManual or disabledFailing; ""
	// while enabled, and in records saved before it was kept (shown as
	// manual: only a request could disable an endpoint then).
	DisabledReason string `json:"disabled_reason,omitempty"`
	// FailingSince opens e's failure window (failing.go): the time of the
	// first failed attempt since the last that succeeded, in unix
	// nanoseconds of hooks.now; 0 when there is none.
	FailingSince int64 `json:"failing_since,omitempty"`

	Secret       string `json:"secret"`
	OldSecret    string `json:"old_secret,omitempty"`     // still signs until OldSecretEnd
	OldSecretEnd int64  `json:"old_secret_end,omitempty"` // unix seconds

	NextSeq uint64 `json:"next_seq"` // sequence of this endpoint's next delivery

}

// view is the endpoint as docs/api.md shows it: no secret.
func (e *Endpoint) view() map[string]any {
	return map[string]any{
		"id": e.ID, "url": e.URL, "description": e.Description, "events": e.Events,
		"enabled": e.Enabled, "disabled_reason": e.disabledReason(), "created_at": e.CreatedAt, "updated_at": e.UpdatedAt,
	}
}

// disabledReason is e's disabled_reason as API.md §5 shows it: null
// while enabled.
func (e *Endpoint) disabledReason() any {
	if e.Enabled {
		return nil
	}
	return cmp.Or(e.DisabledReason, DisabledManual)
}

// secrets returns the secrets that sign a request made at now: the current
// one, and the previous one during its rotation grace.
func (e *Endpoint) secrets(now time.Time) (cur, old string) {
	if e.OldSecret != "" && now.Unix() < e.OldSecretEnd {
		return e.Secret, e.OldSecret
	}
	return e.Secret, ""
}

func (e *Endpoint) subscribed(typ string) bool { return slices.Contains(e.Events, typ) }

// event is a published event; Body is the exact envelope every delivery
// of it sends.
type Event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt int64           `json:"created_at"`
	Body      json.RawMessage `json:"body"`
}

// Delivery statuses.
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// delivery is one event sent to one endpoint, with every attempt.
type Delivery struct {
	ID         string    `json:"id"`
	Seq        uint64    `json:"seq"`
	EndpointID string    `json:"endpoint_id"`
	EventID    string    `json:"event_id"`
	Status     string    `json:"status"`
	CreatedAt  int64     `json:"created_at"`
	NextAt     int64     `json:"next_at,omitempty"` // unix nanoseconds of the next attempt, while pending
	Attempts   []Attempt `json:"attempts"`
	Explicit   bool      `json:"explicit,omitempty"` // made by the test call or a manual retry
	// Made explicitly while the endpoint was disabled: it goes once all
	// the same (refusalLocked).
	WhileDisabled bool   `json:"while_disabled,omitempty"`
	Reason        string `json:"reason,omitempty"` // why it failed
	// StoreID is the store of the delivery's endpoint: what its budget
	// is given back to should the endpoint be gone when it ends.
	StoreID string `json:"store_id,omitempty"`
	// LoggedAt is the delivery's score in its endpoint's log (unix
	// microseconds of when it was made): its place among the finished
	// ones, for trimming.
	LoggedAt int64 `json:"logged_at,omitempty"`
	// The event the delivery sends. Earlier builds kept events in
	// records of their own, and left it out: upgradeRecords puts it in.
	Event *Event `json:"event,omitempty"`

	// written is the length of d's record as this process last wrote
	// it, ended: what d holds in its endpoint's log (logCost). Not in
	// the record.
	written int
}

// attempt is one HTTP request of a delivery. The request headers other
// than the signatures are fixed, so only those are kept.
type Attempt struct {
	At           int64  `json:"at"`            // unix nanoseconds
	URL          string `json:"url,omitempty"` // where it was sent: the endpoint's URL then (absent from state saved before it was kept)
	Timestamp    int64  `json:"t"`             // the signed timestamp, unix seconds
	Signature    string `json:"sig"`
	StdSignature string `json:"std_sig"`
	Status       int    `json:"status,omitempty"`
	ResponseBody string `json:"response_body,omitempty"` // first 4 KiB
	DurationMS   int64  `json:"duration_ms"`
	Error        string `json:"error,omitempty"`
}

// idem is what an earlier build kept of an Idempotency-Key (in its
// webhooks.json too): the event it published, and until when.
type idem struct {
	EventID string `json:"event_id"`
	Expires int64  `json:"expires"` // unix seconds
}

// Hooks is the webhook engine of one process: its operations (api.go)
// work on the state in St; Start runs its sender.
type Hooks struct {
	Cfg *config.Config
	Now func() time.Time // the clock of events' dates, failure windows and the queue (tests move it)
	Log *slog.Logger     // the service's: where an endpoint disabled as failing is told
	// Failing reports why the store refuses changes now, or nil; and
	// ReadFailing why reads cannot be answered (a store of its own,
	// Redis, that does not answer). The service sets them; both answer
	// from what the store already knows, without a round trip.
	Failing, ReadFailing func() error
	St                   store.Store // the state; set before Open
	// SendSt, when set, is St as the sender writes it: a view whose
	// changes are not waited for (embedded.DB.NoWait), since nobody is
	// answered for them; nil: St.
	SendSt store.Store
	// NoSend keeps Start from sending: for a process whose host sends
	// (the edge module).
	NoSend bool
	// Alone says that no other process uses St (the embedded store of
	// this process, or of the edge host): Open frees the claims a
	// process before it left.
	Alone  bool
	Budget budgets // each store's; tests lower them

	counts    counters
	trims     trims
	send      *sender
	stop      context.CancelFunc
	done      chan struct{}
	closeIdle func()
}

func NewHooks(cfg *config.Config) *Hooks {
	return &Hooks{
		Cfg:         cfg,
		Now:         time.Now,
		Log:         slog.Default(),
		Failing:     func() error { return nil },
		ReadFailing: func() error { return nil },
		Budget:      budgets{Pending: PendingBudget, Idem: idemBudget, Log: logBudget},
	}
}

// rec is the state of record in hk.St.
func (hk *Hooks) rec() *records {
	r := &records{st: hk.St, now: hk.Now, budget: &hk.Budget, failed: hk.failed}
	if s := hk.send; s != nil {
		r.busy = s.busy
	}
	return r
}

// newCost is what a new delivery of an event of size bytes counts against
// its store's budget.pending: its logCost before any attempt.
func NewCost(size int) int64 { return int64(size) + pendingOverhead }

// logCost is what a finished delivery holds in its endpoint's log, its
// record n bytes long: the record, and the entries that list it. It
// counts against its endpoint's budget.log.
func logCost(n int) int64 { return int64(n) + pendingOverhead }

func NewID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }
