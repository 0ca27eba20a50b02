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
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/store"
)

const (
	MaxEndpointsPerStore = 5
	EventOrderStatus     = "order.status.updated"
	EventTest            = "webhook.test"
	idempotencyTTL       = 24 * time.Hour

	// PendingBudget bounds what a store's pending deliveries hold (NewCost
	// each). They wait until delivered or given up (the retry schedule:
	// about 45 h by default), so a store publishing to an endpoint that
	// never answers would pile them up without end; past it, what would
	// add one answers 503 until deliveries end.
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

// NewCost is what a new delivery of an event of size bytes counts against
// its store's budgets.Pending: its logCost before any attempt.
func NewCost(size int) int64 { return int64(size) + pendingOverhead }

// logCost is what a finished delivery holds in its endpoint's log, its
// record n bytes long: the record, and the entries that list it. It
// counts against its endpoint's budgets.Log.
func logCost(n int) int64 { return int64(n) + pendingOverhead }

func NewID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }
