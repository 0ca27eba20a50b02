// Package webhook is the service's webhook engine: the endpoints, events
// and deliveries of every store and their delivery log, a working copy
// in memory (Hooks, behind one mutex) written through to a store.Store
// before a change is answered; the dispatcher that signs and sends the
// deliveries (the slow part, the HTTP request to the merchant, outside
// the lock); and the sharing of the state between replicas on one store.
// The root package serves its HTTP routes and dashboard pages; it is a
// package of its own so that the edge host (wasm/) can run it natively.
//
// Methods named ...Locked need hk.Mu held; the others take it.
package webhook

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// counts what it holds (logCost: its event's bytes, its attempts and
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
	// attemptOverhead is what an attempt counts beyond its strings: its
	// numbers, and the maps and JSON it is shown and saved as.
	attemptOverhead = 256
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

	written bool // Enabled as this replica last wrote or read it (shared: takeInEndpointLocked)

	Log      []*Delivery `json:"-"` // oldest first
	LogBytes int64       `json:"-"` // what log's finished deliveries hold (logCost), against hooks.budget.log
	Inflight int         `json:"-"` // attempts under way
	Waiting  []*Delivery `json:"-"` // due while inflight was at its limit
	Finished int         `json:"-"` // deliveries in log no longer pending

	// The context of e's attempts in the native build, made with the
	// first; cancelled when e is deleted, so that its attempts under way,
	// no longer counted anywhere, give their workers back at once.
	attempts       context.Context
	cancelAttempts context.CancelFunc
}

// view is the endpoint as docs/api.md shows it: no secret.
func (e *Endpoint) View() map[string]any {
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

	Refs int `json:"-"` // deliveries in hooks.deliv that refer to it
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
	// The event the delivery sends, kept in the delivery's own record by
	// a sender on the queue (sender.go); nil in the records of the
	// working copy, whose events have records of their own.
	Event *Event `json:"event,omitempty"`

	Ev    *Event `json:"-"`
	Index int    `json:"-"` // in the hooks' timer heap; -1 when not in it
	job   *job   // the attempt under way, if any
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

// idem remembers the event an Idempotency-Key published.
type idem struct {
	EventID string `json:"event_id"`
	Expires int64  `json:"expires"` // unix seconds
}

// idemEntry is a key of hooks.idem in hooks.idemQueue, with the expiry it
// had when queued.
type IdemEntry struct {
	Key     string
	Expires int64
}

// hooks is the webhook state of all stores and the dispatcher's queues.
type Hooks struct {
	Cfg *config.Config
	Now func() time.Time // the clock of events' dates and endpoints' failure windows (tests move it)
	Log *slog.Logger     // the service's: where an endpoint disabled as failing is told (failing.go)
	// Failing reports why the store refuses changes now, or nil; and
	// ReadFailing why reads cannot be answered (a store of its own,
	// Redis, that does not answer). The service sets them; both answer
	// from what the store already knows, without a round trip.
	Failing, ReadFailing func() error
	d                    *dispatcher
	Outcomes             struct{ Succeeded, Failed, Retried atomic.Int64 } // attempts by outcome, for /metrics
	Ended                struct{ Succeeded, Failed atomic.Int64 }          // deliveries by how they ended, attempted or not, for /metrics

	St           store.Store     // where the state is kept (store.go); nil keeps nothing
	Share        *sharing        // with other replicas (share.go); nil when there are none
	persistMu    sync.Mutex      // one persist at a time, so an older form never overwrites a newer
	indexed      map[string]bool // kind:id of the records the store's indexes list; persistMu guards
	persistedGen uint64          // touchGen written by the last persist; persistMu guards
	PersistBad   atomic.Bool     // the last persist failed: changes try to write what it left first

	Mu        sync.Mutex // guards the fields below
	Endpoints map[string]*Endpoint
	ByStore   map[string][]*Endpoint // in creation order
	Events    map[string]*Event      // events some delivery still refers to
	Deliv     map[string]*Delivery
	Idem      map[string]idem // store id + "\x00" + key
	IdemQueue []IdemEntry     // idem's keys in the order they expire, and ones since replaced (tick skips those)
	Sched     timerHeap       // pending deliveries by NextAt
	Ready     []*Delivery     // due, endpoint under its in-flight limit
	Touched   map[string]bool // kind:id of what changed since the last persist
	touchGen  uint64          // touches made so far
	closed    bool
	Leading   bool // this replica sends the deliveries: always, but for a follower of a shared state (share.go)
	// NoLead keeps a follower of a shared state from ever taking the
	// lease: it makes deliveries and changes endpoints, and another
	// sends (the edge module, whose host's dispatcher sends). Set before
	// the first Tick.
	NoLead    bool
	SendUntil time.Time        // shared: when the lease held runs short (sendingLocked)
	term      uint64           // shared: leaderships begun and ended; a job of another than the current is dropped
	Pending   map[string]int64 // store id → what its pending deliveries hold (logCost), against budget.pending
	IdemCount map[string]int   // store id → its keys in idem, against budget.idem
	Budget    struct {
		Pending int64
		Idem    int
		Log     int64
	}
	wake chan struct{} // Poke's: sched's head changed, or another's change to take in (the edge host's, after its module's)

	// parked is what the saved state held for stores no longer
	// configured: kept as it was, neither served nor sent, and written
	// back with every save, so that configuring the store again (a
	// rollback) finds its endpoints, secrets and log. Set by load only.
	Parked HooksFile
}

func NewHooks(cfg *config.Config) *Hooks {
	hk := &Hooks{
		Cfg:         cfg,
		Now:         time.Now,
		Log:         slog.Default(),
		Failing:     func() error { return nil },
		ReadFailing: func() error { return nil },
		Endpoints:   map[string]*Endpoint{},
		ByStore:     map[string][]*Endpoint{},
		Events:      map[string]*Event{},
		Deliv:       map[string]*Delivery{},
		Idem:        map[string]idem{},
		wake:        make(chan struct{}, 1),
		Pending:     map[string]int64{},
		IdemCount:   map[string]int{},
		Leading:     true,
	}
	hk.Budget.Pending, hk.Budget.Idem, hk.Budget.Log = PendingBudget, idemBudget, logBudget
	return hk
}

// newCost is what a new delivery of an event of size bytes counts against
// its store's budget.pending: its logCost before any attempt.
func NewCost(size int) int64 { return int64(size) + pendingOverhead }

// attemptCost is what the attempt a adds to its delivery's logCost: the
// answer it keeps, up to 4 KiB, and the rest.
func attemptCost(a *Attempt) int64 {
	return int64(len(a.URL)+len(a.Signature)+len(a.StdSignature)+len(a.ResponseBody)+len(a.Error)) + attemptOverhead
}

// logCost is what the delivery d holds: its event and its attempts. It
// counts against its store's budget.pending while d is pending, and
// against its endpoint's budget.log once d has ended.
func LogCost(d *Delivery) int64 {
	n := NewCost(len(d.event().Body))
	for i := range d.Attempts {
		n += attemptCost(&d.Attempts[i])
	}
	return n
}

// roomLocked reports whether the store has room in budget.pending for n
// more pending deliveries of an event of size bytes. hk.Mu must be held.
func (hk *Hooks) RoomLocked(storeID string, n, size int) bool {
	return hk.Pending[storeID]+int64(n)*NewCost(size) <= hk.Budget.Pending
}

func NewID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// queueDepth returns the deliveries waiting to be sent: scheduled, due,
// parked on a busy endpoint, and under way.
func (hk *Hooks) QueueDepth() int {
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	n := len(hk.Sched) // ready deliveries hold a place of their endpoint's inflight
	for _, e := range hk.Endpoints {
		n += len(e.Waiting) + e.Inflight
	}
	return n
}
