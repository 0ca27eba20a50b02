package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"deeplink/internal/store"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Webhook endpoints, events and the delivery log (docs/api.md). All of it is
// one hooks value behind one mutex: requests and deliveries each touch it
// briefly, while the slow part, the HTTP request to the merchant, runs
// outside the lock (dispatch.go).

const (
	maxEndpointsPerStore = 5
	eventOrderStatus     = "order.status.updated"
	eventTest            = "webhook.test"
	idempotencyTTL       = 24 * time.Hour

	// A store's undelivered webhooks stay in memory, and in the saved
	// state, until delivered or given up (the retry schedule: about 45 h
	// by default), so a store publishing to an endpoint that never
	// answers would pile them up without end. Each pending delivery
	// counts what it holds (logCost: its event's bytes, its attempts and
	// pendingOverhead) against the store's pendingBudget; past it, what
	// would add one answers 503 (over its memory budget) until
	// deliveries end.
	pendingBudget   = 64 << 20
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

// errOverBudget answers a change that would take a store's webhooks past
// pendingBudget or idemBudget.
var errOverBudget = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
	Message: "this store's undelivered webhooks, or its remembered Idempotency-Keys, are over their memory budget; retry later", retryAfter: 30}

var knownEvents = []string{eventOrderStatus, eventTest}

var orderStatuses = []string{"pending", "completed", "archived", "canceled", "requires_action"}

// endpoint is a merchant's webhook URL. Secrets leave the service only
// through create, rotate and /secret.
type endpoint struct {
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

	log      []*delivery // oldest first
	logBytes int64       // what log's finished deliveries hold (logCost), against hooks.budget.log
	inflight int         // attempts under way
	waiting  []*delivery // due while inflight was at its limit
	finished int         // deliveries in log no longer pending

	// The context of e's attempts in the native build, made with the
	// first; cancelled when e is deleted, so that its attempts under way,
	// no longer counted anywhere, give their workers back at once.
	attempts       context.Context
	cancelAttempts context.CancelFunc
}

// view is the endpoint as docs/api.md shows it: no secret.
func (e *endpoint) view() map[string]any {
	return map[string]any{
		"id": e.ID, "url": e.URL, "description": e.Description, "events": e.Events,
		"enabled": e.Enabled, "disabled_reason": e.disabledReason(), "created_at": e.CreatedAt, "updated_at": e.UpdatedAt,
	}
}

// disabledReason is e's disabled_reason as API.md §5 shows it: null
// while enabled.
func (e *endpoint) disabledReason() any {
	if e.Enabled {
		return nil
	}
	return cmp.Or(e.DisabledReason, disabledManual)
}

// secrets returns the secrets that sign a request made at now: the current
// one, and the previous one during its rotation grace.
func (e *endpoint) secrets(now time.Time) (cur, old string) {
	if e.OldSecret != "" && now.Unix() < e.OldSecretEnd {
		return e.Secret, e.OldSecret
	}
	return e.Secret, ""
}

func (e *endpoint) subscribed(typ string) bool { return slices.Contains(e.Events, typ) }

// event is a published event; Body is the exact envelope every delivery
// of it sends.
type event struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt int64           `json:"created_at"`
	Body      json.RawMessage `json:"body"`

	refs int // deliveries in hooks.deliv that refer to it
}

// Delivery statuses.
const (
	statusPending   = "pending"
	statusSucceeded = "succeeded"
	statusFailed    = "failed"
)

// delivery is one event sent to one endpoint, with every attempt.
type delivery struct {
	ID         string    `json:"id"`
	Seq        uint64    `json:"seq"`
	EndpointID string    `json:"endpoint_id"`
	EventID    string    `json:"event_id"`
	Status     string    `json:"status"`
	CreatedAt  int64     `json:"created_at"`
	NextAt     int64     `json:"next_at,omitempty"` // unix nanoseconds of the next attempt, while pending
	Attempts   []attempt `json:"attempts"`
	Explicit   bool      `json:"explicit,omitempty"` // made by the test call or a manual retry
	Reason     string    `json:"reason,omitempty"`   // why it failed

	ev    *event
	index int  // in the hooks' timer heap; -1 when not in it
	job   *job // the attempt under way, if any
}

// attempt is one HTTP request of a delivery. The request headers other
// than the signatures are fixed, so only those are kept.
type attempt struct {
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
type idemEntry struct {
	key     string
	expires int64
}

// hooks is the webhook state of all stores and the dispatcher's queues.
type hooks struct {
	cfg      *Config
	now      func() time.Time // the clock of events' dates and endpoints' failure windows (tests move it)
	log      *slog.Logger     // the service's: where an endpoint disabled as failing is told (failing.go)
	d        *dispatcher
	outcomes struct{ succeeded, failed, retried atomic.Int64 } // attempts by outcome, for /metrics
	ended    struct{ succeeded, failed atomic.Int64 }          // deliveries by how they ended, attempted or not, for /metrics

	st           store.Store     // where the state is kept (hookstore.go); nil keeps nothing
	share        *sharing        // with other replicas (hookshare.go); nil when there are none
	persistMu    sync.Mutex      // one persist at a time, so an older form never overwrites a newer
	indexed      map[string]bool // kind:id of the records the store's indexes list; persistMu guards
	persistedGen uint64          // touchGen written by the last persist; persistMu guards
	persistBad   atomic.Bool     // the last persist failed: changes try to write what it left first

	mu        sync.Mutex // guards the fields below
	endpoints map[string]*endpoint
	byStore   map[string][]*endpoint // in creation order
	events    map[string]*event      // events some delivery still refers to
	deliv     map[string]*delivery
	idem      map[string]idem // store id + "\x00" + key
	idemQueue []idemEntry     // idem's keys in the order they expire, and ones since replaced (tick skips those)
	sched     timerHeap       // pending deliveries by NextAt
	ready     []*delivery     // due, endpoint under its in-flight limit
	touched   map[string]bool // kind:id of what changed since the last persist
	touchGen  uint64          // touches made so far
	closed    bool
	leading   bool             // this replica sends the deliveries: always, but for a follower of a shared state (hookshare.go)
	sendUntil time.Time        // shared: when the lease held runs short (sendingLocked)
	term      uint64           // shared: leaderships begun and ended; a job of another than the current is dropped
	pending   map[string]int64 // store id → what its pending deliveries hold (logCost), against budget.pending
	idemCount map[string]int   // store id → its keys in idem, against budget.idem
	budget    struct {
		pending int64
		idem    int
		log     int64
	}
	wake chan struct{} // poked by pokeLocked: sched's head changed, or (edge build) a job became ready

	// parked is what the saved state held for stores no longer
	// configured: kept as it was, neither served nor sent, and written
	// back with every save, so that configuring the store again (a
	// rollback) finds its endpoints, secrets and log. Set by load only.
	parked hooksFile
}

func newHooks(cfg *Config) *hooks {
	hk := &hooks{
		cfg:       cfg,
		now:       time.Now,
		log:       slog.Default(),
		endpoints: map[string]*endpoint{},
		byStore:   map[string][]*endpoint{},
		events:    map[string]*event{},
		deliv:     map[string]*delivery{},
		idem:      map[string]idem{},
		wake:      make(chan struct{}, 1),
		pending:   map[string]int64{},
		idemCount: map[string]int{},
		leading:   true,
	}
	hk.budget.pending, hk.budget.idem, hk.budget.log = pendingBudget, idemBudget, logBudget
	return hk
}

// newCost is what a new delivery of an event of size bytes counts against
// its store's budget.pending: its logCost before any attempt.
func newCost(size int) int64 { return int64(size) + pendingOverhead }

// attemptCost is what the attempt a adds to its delivery's logCost: the
// answer it keeps, up to 4 KiB, and the rest.
func attemptCost(a *attempt) int64 {
	return int64(len(a.URL)+len(a.Signature)+len(a.StdSignature)+len(a.ResponseBody)+len(a.Error)) + attemptOverhead
}

// logCost is what the delivery d holds: its event and its attempts. It
// counts against its store's budget.pending while d is pending, and
// against its endpoint's budget.log once d has ended.
func logCost(d *delivery) int64 {
	n := newCost(len(d.ev.Body))
	for i := range d.Attempts {
		n += attemptCost(&d.Attempts[i])
	}
	return n
}

// roomLocked reports whether the store has room in budget.pending for n
// more pending deliveries of an event of size bytes. hk.mu must be held.
func (hk *hooks) roomLocked(storeID string, n, size int) bool {
	return hk.pending[storeID]+int64(n)*newCost(size) <= hk.budget.pending
}

func newID(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// queueDepth returns the deliveries waiting to be sent: scheduled, due,
// parked on a busy endpoint, and under way.
func (hk *hooks) queueDepth() int {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	n := len(hk.sched) // ready deliveries hold a place of their endpoint's inflight
	for _, e := range hk.endpoints {
		n += len(e.waiting) + e.inflight
	}
	return n
}

// webhookRoutes adds the webhook routes of docs/api.md.
func (s *server) webhookRoutes(mux *http.ServeMux) {
	const ep = "/stores/{store_id}/webhooks/{endpoint_id}"
	mux.HandleFunc("POST /stores/{store_id}/webhooks", s.persisting(s.withStore(refusing(s, s.handleCreateEndpoint))))
	mux.HandleFunc("GET /stores/{store_id}/webhooks", s.caughtUp(s.withStore(reading(s, s.handleListEndpoints))))
	mux.HandleFunc("GET "+ep, s.caughtUp(s.withEndpoint(reading(s, s.handleGetEndpoint))))
	mux.HandleFunc("GET "+ep+"/secret", s.caughtUp(s.withEndpoint(reading(s, s.handleGetSecret))))
	mux.HandleFunc("PATCH "+ep, s.persisting(s.withEndpoint(refusing(s, s.handlePatchEndpoint))))
	mux.HandleFunc("DELETE "+ep, s.persisting(s.withEndpoint(refusing(s, s.handleDeleteEndpoint))))
	mux.HandleFunc("POST "+ep+"/rotate-secret", s.persisting(s.withEndpoint(refusing(s, s.handleRotateSecret))))
	mux.HandleFunc("POST "+ep+"/test", s.persisting(s.withEndpoint(refusing(s, s.handleTestEndpoint))))
	mux.HandleFunc("GET "+ep+"/deliveries", s.caughtUp(s.withEndpoint(reading(s, s.handleListDeliveries))))
	mux.HandleFunc("GET "+ep+"/deliveries/{delivery_id}", s.caughtUp(s.withEndpoint(reading(s, s.handleGetDelivery))))
	mux.HandleFunc("POST "+ep+"/deliveries/{delivery_id}/retry", s.persisting(s.withEndpoint(refusing(s, s.handleRetryDelivery))))
	mux.HandleFunc("POST "+ep+"/recover", s.persisting(s.withEndpoint(refusing(s, s.handleRecover))))
	mux.HandleFunc("POST /stores/{store_id}/events", s.persisting(s.withStore(refusing(s, s.handlePublish))))
}

// persisting runs h, a change to the webhook state, and answers a 2xx
// only once what it changed is written (hooks.persist); when that fails,
// the answer is 503 (unable to persist), the change not
// acknowledged. Any other answer changed nothing and goes as it is.
// With replicas sharing the state, h runs under their lock
// (hookshare.go) when the request names a store and its key: others
// are answered without it.
func (s *server) persisting(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.change(w, r, s.keyOK(r), h)
	}
}

// change is persisting's handler, under the lock of a shared state when
// locked.
func (s *server) change(w http.ResponseWriter, r *http.Request, locked bool, h http.HandlerFunc) {
	hk := s.hooks
	ctx := r.Context()
	if hk.share != nil && locked {
		// The body first: a slow client must not hold every replica's
		// webhook changes up.
		if !bufferBody(w, r) {
			return
		}
		work, unlock, err := hk.lock(ctx)
		if err != nil {
			s.log.Error("webhooks: cannot take the lock of the shared state; answering 503", "err", err)
			writeError(w, errPersist)
			return
		}
		defer unlock()
		ctx = work
	}
	if hk.persistBad.Load() && (hk.share == nil || locked) {
		hk.persist(ctx) // what the last one left: refusing tells how it went
	}
	rec := &recorder{header: http.Header{}}
	h(rec, r)
	if rec.code() < 300 {
		if err := hk.persist(ctx); err != nil {
			s.log.Error("webhooks: writing a change failed; answering 503", "err", err)
			writeError(w, errPersist)
			return
		}
	}
	rec.copyTo(w)
}

// caughtUp runs h, a read of the webhook state, once the state has
// taken in what other replicas sharing it changed (hooks.catchUp), when
// the request names a store and its key: what any replica answered is
// then seen. It answers 503 when that cannot be read.
func (s *server) caughtUp(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.hooks.share != nil && s.keyOK(r) {
			if err := s.hooks.fresh(r.Context()); err != nil {
				s.log.Error("webhooks: cannot read the shared state; answering 503", "err", err)
				writeError(w, errStoreDown)
				return
			}
		}
		h(w, r)
	}
}

// keyOK reports whether r names a configured store and carries one of
// its API keys: only such requests wait for the shared state.
func (s *server) keyOK(r *http.Request) bool {
	st := s.cfg.Store(r.PathValue("store_id"))
	return st != nil && keyIndex(st, r.Header.Get("X-API-Key")) >= 0
}

// refusing answers 503 instead of running h while changes cannot be
// written: the store refuses them, or the last write of the webhook
// state failed (persisting has just tried it again). It goes after the
// store, key and endpoint checks, so that those answer as they always
// do, and may run under hooks.mu (withEndpoint).
func refusing[T any](s *server, h func(http.ResponseWriter, *http.Request, T)) func(http.ResponseWriter, *http.Request, T) {
	return func(w http.ResponseWriter, r *http.Request, v T) {
		if s.storeFailing() != nil || s.hooks.persistBad.Load() {
			writeError(w, errPersist)
			return
		}
		h(w, r, v)
	}
}

// reading answers 503 instead of running h, a read of the webhook state,
// while the store of its own that holds the state (Redis) does not
// answer (server.remoteFailing): API.md §9 has every read of state wait
// for it, as the sign-in's reads do. Like refusing, it goes after the
// store, key and endpoint checks.
func reading[T any](s *server, h func(http.ResponseWriter, *http.Request, T)) func(http.ResponseWriter, *http.Request, T) {
	return func(w http.ResponseWriter, r *http.Request, v T) {
		if s.remoteFailing() {
			writeError(w, errStoreDown)
			return
		}
		h(w, r, v)
	}
}

// withStore checks the store and its API key before h. A client that has
// failed the key check too often gets 429 (keyGuard).
func (s *server) withStore(h func(http.ResponseWriter, *http.Request, *StoreConfig)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.serveStore(w, r, r.PathValue("store_id"), h)
	}
}

// serveStore is withStore's handler for the store named id.
func (s *server) serveStore(w http.ResponseWriter, r *http.Request, id string, h func(http.ResponseWriter, *http.Request, *StoreConfig)) {
	st := s.storeNamed(w, id)
	if st == nil {
		return
	}
	// The client's address is worked out only when it is needed: while
	// no client has failed, a request with the right key never is.
	client := ""
	if s.keys.anyFailing() {
		client = guardKey(clientAddr(r, s.cfg.Proxies()), st.ID)
		if blocked, wait := s.keys.blocked(client, time.Now); blocked {
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: "rate_limited",
				Message:    "too many requests with a wrong or missing X-API-Key for this store from this address; retry later",
				retryAfter: max(1, int(wait.Seconds()+0.999))})
			return
		}
	}
	idx := keyIndex(st, r.Header.Get("X-API-Key"))
	if idx < 0 {
		if client == "" {
			client = guardKey(clientAddr(r, s.cfg.Proxies()), st.ID)
		}
		s.keys.failed(r.Context(), client, time.Now())
		writeError(w, errUnauthorized)
		return
	}
	if e := s.overKeyBudget(r.Context(), st, idx); e != nil {
		writeError(w, e)
		return
	}
	h(w, r, st)
}

// withEndpoint also finds the endpoint, which must belong to the store
// (inEndpoint).
func (s *server) withEndpoint(h func(http.ResponseWriter, *http.Request, *endpoint)) http.HandlerFunc {
	return s.withStore(s.inEndpoint(h))
}

// inEndpoint finds the endpoint of the path's endpoint_id in the store st
// and runs h on it, or answers 404. h runs with s.hooks.mu held, so the
// body is read before the lock is taken and h's answer is kept in memory
// and sent after it is released: a slow client never holds up deliveries
// or other stores.
func (s *server) inEndpoint(h func(http.ResponseWriter, *http.Request, *endpoint)) func(http.ResponseWriter, *http.Request, *StoreConfig) {
	return func(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
		if !bufferBody(w, r) {
			return
		}
		rec := &recorder{header: http.Header{}}
		hk := s.hooks
		hk.mu.Lock()
		if e := hk.endpoints[r.PathValue("endpoint_id")]; e == nil || e.StoreID != st.ID {
			writeError(rec, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no webhook endpoint with that id in this store"})
		} else {
			h(rec, r, e)
		}
		hk.mu.Unlock()
		rec.copyTo(w)
	}
}

// bufferBody reads r's body into memory, up to one byte past maxBody
// (which tells 413 to whoever reads it next), and puts it back as r.Body;
// when the body cannot be read it answers 400 and reports false.
func bufferBody(w http.ResponseWriter, r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "could not read the body"})
		return false
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return true
}

// readJSONObject reads a JSON object body into v by decodeObject's rules,
// answering 415, 413 or 400 itself when it cannot. The fields of v are
// json.RawMessage: copies, which the caller checks with validUnicode.
func readJSONObject(w http.ResponseWriter, r *http.Request, v any) bool {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, errMediaType)
		return false
	}
	body, buf, err := readBody(r)
	if err != nil {
		writeError(w, asAPIError(err))
		return false
	}
	defer bodyPool.Put(buf)
	if err := decodeObject(body, v); err != nil {
		writeError(w, asAPIError(err))
		return false
	}
	return true
}
