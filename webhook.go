package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Webhook endpoints, events and the delivery log (API.md §5). All of it is
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
	// would add one answers 503 (API.md §3: over its memory budget) until
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

	Secret       string `json:"secret"`
	OldSecret    string `json:"old_secret,omitempty"`     // still signs until OldSecretEnd
	OldSecretEnd int64  `json:"old_secret_end,omitempty"` // unix seconds

	NextSeq uint64 `json:"next_seq"` // sequence of this endpoint's next delivery

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

// view is the endpoint as API.md §5 shows it: no secret.
func (e *endpoint) view() map[string]any {
	return map[string]any{
		"id": e.ID, "url": e.URL, "description": e.Description, "events": e.Events,
		"enabled": e.Enabled, "created_at": e.CreatedAt, "updated_at": e.UpdatedAt,
	}
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
	index int // in the hooks' timer heap; -1 when not in it
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
	d        *dispatcher
	outcomes struct{ succeeded, failed, retried atomic.Int64 } // attempts by outcome, for /metrics
	ended    struct{ succeeded, failed atomic.Int64 }          // deliveries by how they ended, attempted or not, for /metrics

	saveMu  sync.Mutex  // one save at a time, so an older state never overwrites a newer
	saveBad atomic.Bool // the last save failed: changes answer 503 until one works
	onDisk  bool        // a save wrote the file, or load read it, so it must be there; saveMu guards

	nextSave time.Time // tick saves no earlier; read and written by tick only

	mu        sync.Mutex // guards the fields below
	endpoints map[string]*endpoint
	byStore   map[string][]*endpoint // in creation order
	events    map[string]*event      // events some delivery still refers to
	deliv     map[string]*delivery
	idem      map[string]idem // store id + "\x00" + key
	idemQueue []idemEntry     // idem's keys in the order they expire, and ones since replaced (tick skips those)
	sched     timerHeap       // pending deliveries by NextAt
	ready     []*delivery     // due, endpoint under its in-flight limit
	dirty     bool            // changed since the last save
	closed    bool
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
		endpoints: map[string]*endpoint{},
		byStore:   map[string][]*endpoint{},
		events:    map[string]*event{},
		deliv:     map[string]*delivery{},
		idem:      map[string]idem{},
		wake:      make(chan struct{}, 1),
		pending:   map[string]int64{},
		idemCount: map[string]int{},
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

// webhookRoutes adds the routes of API.md §5.
func (s *server) webhookRoutes(mux *http.ServeMux) {
	const ep = "/stores/{store_id}/webhooks/{endpoint_id}"
	mux.HandleFunc("POST /stores/{store_id}/webhooks", s.withStore(persisting(s, s.handleCreateEndpoint)))
	mux.HandleFunc("GET /stores/{store_id}/webhooks", s.withStore(s.handleListEndpoints))
	mux.HandleFunc("GET "+ep, s.withEndpoint(s.handleGetEndpoint))
	mux.HandleFunc("GET "+ep+"/secret", s.withEndpoint(s.handleGetSecret))
	mux.HandleFunc("PATCH "+ep, s.withEndpoint(persisting(s, s.handlePatchEndpoint)))
	mux.HandleFunc("DELETE "+ep, s.withEndpoint(persisting(s, s.handleDeleteEndpoint)))
	mux.HandleFunc("POST "+ep+"/rotate-secret", s.withEndpoint(persisting(s, s.handleRotateSecret)))
	mux.HandleFunc("POST "+ep+"/test", s.withEndpoint(persisting(s, s.handleTestEndpoint)))
	mux.HandleFunc("GET "+ep+"/deliveries", s.withEndpoint(s.handleListDeliveries))
	mux.HandleFunc("GET "+ep+"/deliveries/{delivery_id}", s.withEndpoint(s.handleGetDelivery))
	mux.HandleFunc("POST "+ep+"/deliveries/{delivery_id}/retry", s.withEndpoint(persisting(s, s.handleRetryDelivery)))
	mux.HandleFunc("POST /stores/{store_id}/events", s.withStore(persisting(s, s.handlePublish)))
}

// persisting answers 503 (API.md §3: "unable to persist") instead of
// running h, a change to the webhook state, while the service cannot
// write its state: it would be acknowledged, then lost with a restart.
// It tells so by the last write of the webhook state, and by the store's,
// which writes every second under load, so a disk that filled since the
// last change of the webhook state is noticed too.
func persisting[T any](s *server, h func(http.ResponseWriter, *http.Request, T)) func(http.ResponseWriter, *http.Request, T) {
	return func(w http.ResponseWriter, r *http.Request, v T) {
		if s.cannotPersist() {
			writeError(w, errPersist)
			return
		}
		h(w, r, v)
	}
}

// cannotPersist reports whether the last write of the webhook state, or of
// the store when it says (memStore.Failing), failed.
func (s *server) cannotPersist() bool {
	if f, ok := s.store.(interface{ Failing() bool }); ok && f.Failing() {
		return true
	}
	return s.hooks.saveBad.Load()
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
		client = clientAddr(r, s.cfg.Proxies())
		if blocked, wait := s.keys.blocked(client, time.Now); blocked {
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: "rate_limited",
				Message:    "too many requests with a wrong or missing X-API-Key from this address; retry later",
				retryAfter: max(1, int(wait.Seconds()+0.999))})
			return
		}
	}
	if !authorized(st, r) {
		if client == "" {
			client = clientAddr(r, s.cfg.Proxies())
		}
		s.keys.failed(client, time.Now())
		writeError(w, errUnauthorized)
		return
	}
	h(w, r, st)
}

// withEndpoint also finds the endpoint, which must belong to the store.
// h runs with s.hooks.mu held, so the body is read before the lock is
// taken and h's answer is kept in memory and sent after it is released:
// a slow client never holds up deliveries or other stores.
func (s *server) withEndpoint(h func(http.ResponseWriter, *http.Request, *endpoint)) http.HandlerFunc {
	return s.withStore(func(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1)) // one byte over tells 413
			if err != nil {
				writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "could not read the body"})
				return
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
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
	})
}

// readJSONObject reads a JSON object body into v, answering 415, 413 or
// 400 itself when it cannot.
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
	if !utf8.Valid(body) {
		// encoding/json would take it, making the bad bytes U+FFFD in
		// what it decodes, while an event's data goes out byte for byte:
		// a body its receivers cannot parse as JSON, signed over bytes
		// that a verifier decoding it as text never sees.
		writeError(w, errNotUTF8)
		return false
	}
	if err := unmarshalObject(body, v); err != nil {
		writeError(w, errInvalidJSON)
		return false
	}
	return true
}

// endpointRequest is the body of create and PATCH. Fields are raw so that
// type errors are reported per field.
type endpointRequest struct {
	URL         json.RawMessage `json:"url"`
	Description json.RawMessage `json:"description"`
	Events      json.RawMessage `json:"events"`
	Enabled     json.RawMessage `json:"enabled"`
}

// endpointChange is a validated endpointRequest; nil means "not given".
type endpointChange struct {
	url, description *string
	events           []string
	enabled          *bool
}

// apply sets the fields c gives on e, updated at now (unix seconds).
func (c *endpointChange) apply(e *endpoint, now int64) {
	if c.url != nil {
		e.URL = *c.url
	}
	if c.description != nil {
		e.Description = *c.description
	}
	if c.events != nil {
		e.Events = c.events
	}
	if c.enabled != nil {
		e.Enabled = *c.enabled
	}
	e.UpdatedAt = now
}

// validate checks the fields given; create requires url and events. A
// field that is null is as one left out, on create and PATCH alike.
func (s *server) validateEndpoint(req *endpointRequest, create bool) (c endpointChange, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	given := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	if given(req.URL) {
		var u string
		if json.Unmarshal(req.URL, &u) != nil {
			bad("url", "must be a string")
		} else if msg := s.checkWebhookURL(u); msg != "" {
			bad("url", msg)
		} else {
			c.url = &u
		}
	} else if create {
		bad("url", "is required")
	}
	if given(req.Description) {
		var d string
		switch {
		case json.Unmarshal(req.Description, &d) != nil:
			bad("description", "must be a string")
		case utf8.RuneCountInString(d) > 1024 || hasControl(d):
			bad("description", "must be at most 1024 characters without control characters")
		default:
			c.description = &d
		}
	}
	if given(req.Events) {
		var evs []string
		if json.Unmarshal(req.Events, &evs) != nil {
			bad("events", "must be a list of event type strings")
		} else if len(evs) == 0 {
			bad("events", "must name at least one event type")
		} else {
			for _, e := range evs {
				if !slices.Contains(knownEvents, e) {
					bad("events", "unknown event type "+strconv.Quote(e)+"; known: "+strings.Join(knownEvents, ", "))
					break
				}
			}
			slices.Sort(evs)
			c.events = slices.Compact(evs)
		}
	} else if create {
		bad("events", "is required")
	}
	if given(req.Enabled) {
		var b bool
		if json.Unmarshal(req.Enabled, &b) != nil {
			bad("enabled", "must be true or false")
		} else {
			c.enabled = &b
		}
	}
	return c, fields
}

// checkWebhookURL returns why u cannot be a webhook URL, or "".
func (s *server) checkWebhookURL(u string) string {
	const msg = "must be an absolute https URL without userinfo or fragment, at most 2048 characters"
	if len(u) > 2048 && utf8.RuneCountInString(u) > 2048 || hasControl(u) || strings.ContainsAny(u, " \\#") {
		return msg // a fragment is never sent: a URL with one is not the one that gets the requests
	}
	p, err := url.Parse(u)
	if err != nil || p.Opaque != "" || p.User != nil || p.Host == "" || p.Hostname() == "" || strings.HasSuffix(p.Host, ":") {
		return msg
	}
	if port := p.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "port " + port + " must be 1 to 65535"
		}
	}
	switch {
	case p.Scheme == "https":
	case p.Scheme == "http" && s.cfg.Webhooks.AllowInsecureURLs:
	default:
		return msg
	}
	return ""
}

func (s *server) handleCreateEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	var req endpointRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	c, fields := s.validateEndpoint(&req, true)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	hk := s.hooks
	hk.mu.Lock()
	if len(hk.byStore[st.ID]) >= maxEndpointsPerStore {
		hk.mu.Unlock()
		writeError(w, validationError([]fieldError{{"url", "this store already has 5 webhook endpoints, the most allowed; delete one first"}}))
		return
	}
	now := time.Now().Unix()
	e := &endpoint{ID: newID("we_"), StoreID: st.ID, Enabled: true, CreatedAt: now, Secret: newSecret()}
	c.apply(e, now)
	hk.endpoints[e.ID] = e
	hk.byStore[st.ID] = append(hk.byStore[st.ID], e)
	hk.dirty = true
	v := e.view()
	v["secret"] = e.Secret
	hk.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store") // it shows the secret
	writeJSON(w, http.StatusCreated, map[string]any{"data": v})
}

func (s *server) handleListEndpoints(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	hk := s.hooks
	hk.mu.Lock()
	list := []map[string]any{}
	for _, e := range hk.byStore[st.ID] {
		list = append(list, e.view())
	}
	hk.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"data": list})
}

func (s *server) handleGetEndpoint(w http.ResponseWriter, r *http.Request, e *endpoint) {
	writeJSON(w, http.StatusOK, map[string]any{"data": e.view()})
}

func (s *server) handleGetSecret(w http.ResponseWriter, r *http.Request, e *endpoint) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"secret": e.Secret}})
}

func (s *server) handlePatchEndpoint(w http.ResponseWriter, r *http.Request, e *endpoint) {
	var req endpointRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	c, fields := s.validateEndpoint(&req, false)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	wasEnabled := e.Enabled
	c.apply(e, time.Now().Unix())
	switch {
	case wasEnabled && !e.Enabled:
		s.hooks.dropQueuedLocked(e, dropAll)
	case c.events != nil:
		s.hooks.dropQueuedLocked(e, e.refusesLocked)
	}
	s.hooks.dirty = true
	writeJSON(w, http.StatusOK, map[string]any{"data": e.view()})
}

func (s *server) handleDeleteEndpoint(w http.ResponseWriter, r *http.Request, e *endpoint) {
	s.hooks.removeEndpointLocked(e)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) handleRotateSecret(w http.ResponseWriter, r *http.Request, e *endpoint) {
	now := time.Now()
	e.OldSecret, e.OldSecretEnd = e.Secret, now.Add(s.cfg.Webhooks.SecretRotationGrace.D()).Unix()
	e.Secret = newSecret()
	e.UpdatedAt = now.Unix()
	s.hooks.dirty = true
	// The answer shows the new secret, as creation shows the first
	// (API.md §5: rotate-secret is "new secret").
	v := e.view()
	v["secret"] = e.Secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

func (s *server) handleTestEndpoint(w http.ResponseWriter, r *http.Request, e *endpoint) {
	hk := s.hooks
	ev := hk.newEventLocked(eventTest, json.RawMessage(`{"id":"test","message":"This is a test event from the webhook settings."}`))
	if !hk.roomLocked(e.StoreID, 1, len(ev.Body)) {
		writeError(w, errOverBudget)
		return
	}
	d := hk.enqueueLocked(e, ev)
	d.Explicit = true // goes even to a disabled endpoint, once
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": ev.ID, "delivery_id": d.ID}})
}

func (s *server) handleRetryDelivery(w http.ResponseWriter, r *http.Request, e *endpoint) {
	hk := s.hooks
	old := hk.deliveryOfLocked(e, r)
	if old == nil {
		writeError(w, errNoDelivery)
		return
	}
	if !hk.roomLocked(e.StoreID, 1, len(old.ev.Body)) {
		writeError(w, errOverBudget)
		return
	}
	d := hk.enqueueLocked(e, old.ev)
	d.Explicit = true // goes even to a disabled endpoint, once
	writeJSON(w, http.StatusAccepted, map[string]any{"data": d.summary()})
}

// publishRequest is the body of POST /events.
type publishRequest struct {
	Type json.RawMessage `json:"type"`
	Data json.RawMessage `json:"data"`
}

func (s *server) handlePublish(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	var req publishRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	typ, object, fields := validateEvent(&req)
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 255 { // a field of the request too: listed with the body's (API.md §3)
		fields = append(fields, fieldError{"Idempotency-Key", "is longer than 255 characters"})
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	id, ok := s.hooks.publish(st.ID, typ, object, key)
	if !ok {
		writeError(w, errOverBudget)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": id}})
}

// publish makes an event of typ for the store and enqueues it for every
// enabled endpoint subscribed to typ. A key seen in the last 24 hours
// returns that event's id and sends nothing. It makes nothing, and
// reports false, when that would take the store past its budget.
func (hk *hooks) publish(storeID, typ string, object json.RawMessage, key string) (eventID string, ok bool) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	now := time.Now()
	k := storeID + "\x00" + key
	prev, seen := hk.idem[k]
	if key != "" {
		if seen && now.Unix() < prev.Expires {
			return prev.EventID, true
		}
		if !seen && hk.idemCount[storeID] >= hk.budget.idem {
			return "", false
		}
	}
	ev := hk.newEventLocked(typ, object)
	var to []*endpoint
	for _, e := range hk.byStore[storeID] {
		if e.Enabled && e.subscribed(typ) {
			to = append(to, e)
		}
	}
	if !hk.roomLocked(storeID, len(to), len(ev.Body)) {
		return "", false
	}
	for _, e := range to {
		hk.enqueueLocked(e, ev)
	}
	if key != "" {
		if !seen {
			hk.idemCount[storeID]++
		}
		exp := now.Add(idempotencyTTL).Unix()
		hk.idem[k] = idem{EventID: ev.ID, Expires: exp}
		// Every key lives idempotencyTTL, so the queue stays in order of
		// expiry but for the wall clock stepping back, which only keeps
		// the keys after a step a little longer than their TTL.
		hk.idemQueue = append(hk.idemQueue, idemEntry{k, exp})
		hk.dirty = true
	}
	return ev.ID, true
}

// validateEvent checks a publish body: a known, publishable type and, for
// order.status.updated, data.object with a string id and a known status.
func validateEvent(req *publishRequest) (typ string, object json.RawMessage, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if len(req.Type) == 0 || string(req.Type) == "null" {
		bad("type", "is required")
	} else if json.Unmarshal(req.Type, &typ) != nil {
		bad("type", "must be a string")
	} else if typ != eventOrderStatus {
		bad("type", "must be a known event type: "+eventOrderStatus+" ("+eventTest+" comes only from the test call)")
	}
	var data struct {
		Object json.RawMessage `json:"object"`
	}
	if len(req.Data) == 0 || string(req.Data) == "null" {
		bad("data", "is required")
		return typ, nil, fields
	}
	if req.Data[0] != '{' || json.Unmarshal(req.Data, &data) != nil {
		bad("data", "must be an object")
		return typ, nil, fields
	}
	var obj map[string]json.RawMessage
	if len(data.Object) == 0 || data.Object[0] != '{' || json.Unmarshal(data.Object, &obj) != nil {
		bad("data.object", "must be an object")
		return typ, nil, fields
	}
	if typ == eventOrderStatus {
		var id, status string
		if json.Unmarshal(obj["id"], &id) != nil || id == "" {
			bad("data.object.id", "must be a non-empty string")
		}
		if json.Unmarshal(obj["status"], &status) != nil || !slices.Contains(orderStatuses, status) {
			bad("data.object.status", "must be one of "+strings.Join(orderStatuses, ", "))
		}
	}
	return typ, data.Object, fields
}

// newEventLocked makes an event with its envelope. The object goes in as
// it was published, compacted but not HTML-escaped: "<", ">" and "&"
// arrive as sent, not as \u003c and the like. hk.mu must be held.
func (hk *hooks) newEventLocked(typ string, object json.RawMessage) *event {
	ev := &event{ID: newID("evt_"), Type: typ, CreatedAt: time.Now().Unix()}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		CreatedAt int64  `json:"created_at"`
		Data      struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}{ID: ev.ID, Type: typ, CreatedAt: ev.CreatedAt, Data: struct {
		Object json.RawMessage `json:"object"`
	}{object}})
	ev.Body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return ev
}

// enqueueLocked creates a pending delivery of ev to e, due now, and logs
// it. hk.mu must be held.
func (hk *hooks) enqueueLocked(e *endpoint, ev *event) *delivery {
	now := time.Now()
	d := &delivery{
		ID: newID("dlv_"), Seq: e.NextSeq, EndpointID: e.ID, EventID: ev.ID, Status: statusPending,
		CreatedAt: now.Unix(), NextAt: now.UnixNano(), ev: ev, index: -1,
	}
	e.NextSeq++
	hk.referLocked(d)
	hk.pending[e.StoreID] += logCost(d)
	e.log = append(e.log, d)
	hk.trimLogLocked(e)
	hk.scheduleLocked(d)
	hk.dirty = true
	return d
}

// trimLogLocked drops the oldest finished deliveries beyond the retention:
// past delivery_log_size, or past budget.log in bytes. Pending ones stay
// whatever their age; so the log is trimmed when one is added or grows,
// and again when ones logged beyond the retention end. It costs O(1) when
// nothing can go (e.finished is 0, as on a dead endpoint) and otherwise
// O(the entries up to the last one dropped): usually the oldest entry is
// finished and goes by reslicing, not by copying the whole log. hk.mu
// must be held.
func (hk *hooks) trimLogLocked(e *endpoint) {
	excess := min(len(e.log)-hk.cfg.Webhooks.DeliveryLogSize, e.finished)
	if over := e.logBytes - hk.budget.log; over > 0 {
		// The oldest finished ones that take it back under the budget.
		n := 0
		for _, d := range e.log {
			if over <= 0 || n == e.finished {
				break
			}
			if d.Status != statusPending {
				n++
				over -= logCost(d)
			}
		}
		excess = max(excess, n)
	}
	if excess <= 0 {
		return
	}
	// e.log[:j] holds the excess oldest finished ones and the pending ones
	// among them; the pending ones move up to just below e.log[j], in order.
	j := 0
	for n := 0; n < excess; j++ {
		if e.log[j].Status != statusPending {
			n++
		}
	}
	w := j
	for i := j - 1; i >= 0; i-- {
		d := e.log[i]
		if d.Status != statusPending {
			e.logBytes -= logCost(d)
			hk.forgetLocked(d)
			continue
		}
		w--
		e.log[w] = d
	}
	clear(e.log[:w])
	e.log = e.log[w:]
	e.finished -= excess
}

// finishedLocked marks the pending d, logged on e, as status. hk.mu must
// be held.
func (e *endpoint) finishedLocked(d *delivery, status string) {
	d.Status, d.NextAt = status, 0
	e.finished++
}

// endLocked ends d, of e, with status (statusSucceeded or statusFailed;
// a failure says why), and counts it: every way a delivery ends goes
// through here, so that /metrics agrees with the delivery logs. hk.mu
// must be held.
func (hk *hooks) endLocked(e *endpoint, d *delivery, status, reason string) {
	hk.pending[e.StoreID] -= logCost(d)
	e.finishedLocked(d, status)
	e.logBytes += logCost(d)
	d.Reason = reason
	if status == statusSucceeded {
		hk.ended.succeeded.Add(1)
	} else {
		hk.ended.failed.Add(1)
	}
}

// referLocked adds d to the indexes, and its event if d is the first
// delivery to refer to it. hk.mu must be held.
func (hk *hooks) referLocked(d *delivery) {
	hk.deliv[d.ID] = d
	if d.ev.refs == 0 {
		hk.events[d.ev.ID] = d.ev
	}
	d.ev.refs++
}

// forgetLocked removes d from the indexes, and its event once no delivery
// refers to it: O(1), by the event's reference count. hk.mu must be held.
func (hk *hooks) forgetLocked(d *delivery) {
	delete(hk.deliv, d.ID)
	if d.ev.refs--; d.ev.refs == 0 {
		delete(hk.events, d.ev.ID)
	}
}

// removeEndpointLocked deletes e, its log and its pending deliveries.
func (hk *hooks) removeEndpointLocked(e *endpoint) {
	for _, d := range e.log {
		if d.index >= 0 {
			hk.sched.remove(d)
		}
		if d.Status == statusPending {
			hk.pending[e.StoreID] -= logCost(d)
		}
		d.Status = statusFailed
		hk.forgetLocked(d)
	}
	hk.ready = slices.DeleteFunc(hk.ready, func(d *delivery) bool { return d.EndpointID == e.ID })
	e.waiting = nil
	if e.cancelAttempts != nil {
		e.cancelAttempts()
	}
	delete(hk.endpoints, e.ID)
	hk.byStore[e.StoreID] = slices.DeleteFunc(hk.byStore[e.StoreID], func(o *endpoint) bool { return o == e })
	hk.dirty = true
}

// summary is a delivery as the log lists it.
func (d *delivery) summary() map[string]any {
	m := map[string]any{
		"id": d.ID, "endpoint_id": d.EndpointID, "event_id": d.EventID, "event_type": d.ev.Type,
		"status": d.Status, "created_at": d.CreatedAt, "attempt_count": len(d.Attempts),
	}
	if d.Status == statusPending {
		m["next_attempt_at"] = time.Unix(0, d.NextAt).Unix()
	}
	if d.Reason != "" {
		m["failure_reason"] = d.Reason
	}
	if n := len(d.Attempts); n > 0 {
		a := d.Attempts[n-1]
		m["last_attempt_at"] = time.Unix(0, a.At).Unix()
		m["last_response_status"] = a.Status
	}
	return m
}

// detail is a delivery with every attempt as API.md §5 shows it.
func (d *delivery) detail(e *endpoint) map[string]any {
	m := d.summary()
	m["url"] = e.URL
	atts := []map[string]any{}
	for _, a := range d.Attempts {
		x := map[string]any{
			"at":              time.Unix(0, a.At).UTC().Format(time.RFC3339Nano),
			"url":             cmp.Or(a.URL, e.URL),
			"request_headers": flatHeader(deliveryHeader(a.signatures(d.ev.ID))),
			"request_body":    string(d.ev.Body),
			"response_status": a.Status,
			"response_body":   a.ResponseBody,
			"duration_ms":     a.DurationMS,
		}
		if a.Error != "" {
			x["error"] = a.Error
		}
		atts = append(atts, x)
	}
	m["attempts"] = atts
	m["request_body"] = string(d.ev.Body)
	return m
}

var errNoDelivery = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no delivery with that id for this endpoint"}

// deliveryOfLocked returns e's delivery named by the request path, or nil.
// hk.mu must be held.
func (hk *hooks) deliveryOfLocked(e *endpoint, r *http.Request) *delivery {
	if d := hk.deliv[r.PathValue("delivery_id")]; d != nil && d.EndpointID == e.ID {
		return d
	}
	return nil
}

func (s *server) handleGetDelivery(w http.ResponseWriter, r *http.Request, e *endpoint) {
	d := s.hooks.deliveryOfLocked(e, r)
	if d == nil {
		writeError(w, errNoDelivery)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": d.detail(e)})
}

// handleListDeliveries lists e's log newest first, filtered by event_type
// and status, a page of limit (default 20, at most 100) at a time. The
// cursor is opaque: it encodes the sequence number to continue below.
func (s *server) handleListDeliveries(w http.ResponseWriter, r *http.Request, e *endpoint) {
	q := r.URL.Query()
	var fields []fieldError
	typ, status := q.Get("event_type"), q.Get("status")
	if typ != "" && !slices.Contains(knownEvents, typ) {
		fields = append(fields, fieldError{"event_type", "must be one of " + strings.Join(knownEvents, ", ")})
	}
	if status != "" && status != statusPending && status != statusSucceeded && status != statusFailed {
		fields = append(fields, fieldError{"status", "must be pending, succeeded or failed"})
	}
	limit := 20
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			fields = append(fields, fieldError{"limit", "must be a whole number from 1 to 100"})
		}
		limit = n
	}
	before := uint64(1<<64 - 1)
	if c := q.Get("cursor"); c != "" {
		seq, ok := parseCursor(e, c)
		if !ok {
			fields = append(fields, fieldError{"cursor", "is not a cursor this endpoint returned"})
		}
		before = seq
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	page := []map[string]any{}
	next := ""
	var lastSeq uint64 // of the last delivery on the page
	for i := len(e.log) - 1; i >= 0; i-- {
		d := e.log[i]
		if d.Seq >= before || typ != "" && d.ev.Type != typ || status != "" && d.Status != status {
			continue
		}
		if len(page) == limit {
			next = cursorFor(e, lastSeq)
			break
		}
		page = append(page, d.summary())
		lastSeq = d.Seq
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": page, "next_cursor": next})
}

// cursorFor is the next_cursor that continues e's log below seq: seq and
// a tag of e's id, so that every other endpoint refuses it.
func cursorFor(e *endpoint, seq uint64) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)
	return base64.RawURLEncoding.EncodeToString(append(b, cursorTag(e)...))
}

// parseCursor returns the sequence number of a cursor cursorFor made for
// e, or false for anything else.
func parseCursor(e *endpoint, c string) (uint64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) != 12 || string(b[8:]) != string(cursorTag(e)) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}

// cursorTag is the part of e's cursors that names e.
func cursorTag(e *endpoint) []byte {
	h := sha256.Sum256([]byte(e.ID))
	return h[:4]
}

// flatHeader is h with one value per name, as the delivery log shows it.
func flatHeader(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[k] = v[0]
	}
	return m
}
