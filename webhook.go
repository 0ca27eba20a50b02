package main

import (
	"bytes"
	"io"
	"net/http"

	"deeplink/internal/webhook"
)

// The webhook routes of docs/api.md: endpoints, events and the delivery
// log. Their state and its dispatcher are the engine of internal/webhook
// (one webhook.Hooks behind one mutex); the handlers here check the
// request, change the state under hk.Mu, and answer once the change is
// written (persisting).

// errOverBudget answers a change that would take a store's webhooks past
// pendingBudget or idemBudget.
var errOverBudget = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
	Message: "this store's undelivered webhooks, or its remembered Idempotency-Keys, are over their memory budget; retry later", retryAfter: 30}

var knownEvents = []string{webhook.EventOrderStatus, webhook.EventTest}

var orderStatuses = []string{"pending", "completed", "archived", "canceled", "requires_action"}

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
	if hk.Share != nil && locked {
		// The body first: a slow client must not hold every replica's
		// webhook changes up.
		if !bufferBody(w, r) {
			return
		}
		work, unlock, err := hk.Lock(ctx)
		if err != nil {
			s.log.Error("webhooks: cannot take the lock of the shared state; answering 503", "err", err)
			writeError(w, errPersist)
			return
		}
		defer unlock()
		ctx = work
	}
	if hk.PersistBad.Load() && (hk.Share == nil || locked) {
		hk.Persist(ctx) // what the last one left: refusing tells how it went
	}
	rec := &recorder{header: http.Header{}}
	h(rec, r)
	if rec.code() < 300 {
		if err := hk.Persist(ctx); err != nil {
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
		if s.hooks.Share != nil && s.keyOK(r) {
			if err := s.hooks.Fresh(r.Context()); err != nil {
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
		if s.storeFailing() != nil || s.hooks.PersistBad.Load() {
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
		if blocked, wait := s.keys.blocked(client, s.now); blocked {
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
		s.keys.failed(r.Context(), client, s.now())
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
func (s *server) withEndpoint(h func(http.ResponseWriter, *http.Request, *webhook.Endpoint)) http.HandlerFunc {
	return s.withStore(s.inEndpoint(h))
}

// inEndpoint finds the endpoint of the path's endpoint_id in the store st
// and runs h on it, or answers 404. h runs with s.hooks.mu held, so the
// body is read before the lock is taken and h's answer is kept in memory
// and sent after it is released: a slow client never holds up deliveries
// or other stores.
func (s *server) inEndpoint(h func(http.ResponseWriter, *http.Request, *webhook.Endpoint)) func(http.ResponseWriter, *http.Request, *StoreConfig) {
	return func(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
		if !bufferBody(w, r) {
			return
		}
		rec := &recorder{header: http.Header{}}
		hk := s.hooks
		hk.Mu.Lock()
		if e := hk.Endpoints[r.PathValue("endpoint_id")]; e == nil || e.StoreID != st.ID {
			writeError(rec, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no webhook endpoint with that id in this store"})
		} else {
			h(rec, r, e)
		}
		hk.Mu.Unlock()
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
