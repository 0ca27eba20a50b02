package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"deeplink/internal/webhook"
)

// The webhook routes of docs/api.md: endpoints, events and the delivery
// log. Their state and its sender are the engine of internal/webhook;
// the handlers here read and check the request, call one of its
// operations (which answers once what it changed is written), and write
// the answer.

// errOverBudget answers a change that would take a store's webhooks past
// their budget of pending deliveries or of Idempotency-Keys.
var errOverBudget = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable",
	Message: "this store's undelivered webhooks, or its remembered Idempotency-Keys, are over their memory budget; retry later", retryAfter: 30}

var (
	errNoEndpoint = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no webhook endpoint with that id in this store"}
	errNoDelivery = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no delivery with that id for this endpoint"}
)

var knownEvents = []string{webhook.EventOrderStatus, webhook.EventTest}

var orderStatuses = []string{"pending", "completed", "archived", "canceled", "requires_action"}

// webhookRoutes adds the webhook routes of docs/api.md.
func (s *server) webhookRoutes(mux *http.ServeMux) {
	const ep = "/stores/{store_id}/webhooks/{endpoint_id}"
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request, *StoreConfig){
		"POST /stores/{store_id}/webhooks":               s.handleCreateEndpoint,
		"GET /stores/{store_id}/webhooks":                s.handleListEndpoints,
		"GET " + ep:                                      s.handleGetEndpoint,
		"GET " + ep + "/secret":                          s.handleGetSecret,
		"PATCH " + ep:                                    s.handlePatchEndpoint,
		"DELETE " + ep:                                   s.handleDeleteEndpoint,
		"POST " + ep + "/rotate-secret":                  s.handleRotateSecret,
		"POST " + ep + "/test":                           s.handleTestEndpoint,
		"GET " + ep + "/deliveries":                      s.handleListDeliveries,
		"GET " + ep + "/deliveries/{delivery_id}":        s.handleGetDelivery,
		"POST " + ep + "/deliveries/{delivery_id}/retry": s.handleRetryDelivery,
		"POST " + ep + "/recover":                        s.handleRecover,
		"POST /stores/{store_id}/events":                 s.handlePublish,
	} {
		mux.HandleFunc(pattern, s.bounded(s.withStore(h)))
	}
}

// storeDeadline bounds what a webhook request waits on a store of its own
// (Redis): a stalled Redis costs it that long, then 503 with Retry-After.
const storeDeadline = 2 * time.Second

// bounded runs h, the key checks and budgets included, with
// storeDeadline on its context when the state is in a store of its own;
// the embedded store's waits are the disk's.
func (s *server) bounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.remote {
			ctx, cancel := context.WithTimeout(r.Context(), storeDeadline)
			defer cancel()
			r = r.WithContext(ctx)
		}
		h(w, r)
	}
}

// writable answers 503 and reports false while the webhook state cannot
// take changes: a change is refused so before its body is read, as one
// without a body is. It goes after the store, key and endpoint checks.
func (s *server) writable(w http.ResponseWriter, r *http.Request) bool {
	if err := s.hooks.Writable(); err != nil {
		s.writeHookError(w, err, true)
		return false
	}
	return true
}

// writeHookError answers err, the error of a webhook operation: what the
// operation found wrong, or 503 when the store refused or failed it
// (errPersist for a change, errStoreDown for a read).
func (s *server) writeHookError(w http.ResponseWriter, err error, change bool) {
	switch {
	case errors.Is(err, webhook.ErrNoEndpoint):
		writeError(w, errNoEndpoint)
	case errors.Is(err, webhook.ErrNoDelivery):
		writeError(w, errNoDelivery)
	case errors.Is(err, webhook.ErrEndpointCap):
		writeError(w, validationError([]fieldError{{"url", endpointCapMessage}}))
	case errors.Is(err, webhook.ErrBadCursor):
		writeError(w, validationError([]fieldError{{"cursor", webhook.ErrBadCursor.Error()}}))
	case errors.Is(err, webhook.ErrOverBudget):
		writeError(w, errOverBudget)
	case errors.Is(err, webhook.ErrUnwritable):
		writeError(w, errPersist)
	case errors.Is(err, webhook.ErrUnreadable):
		writeError(w, errStoreDown)
	case change:
		s.log.Error("webhooks: a change could not be made or written; answering 503", "err", err)
		writeError(w, errPersist)
	default:
		s.log.Error("webhooks: cannot read the state; answering 503", "err", err)
		writeError(w, errStoreDown)
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
	k, err := s.apiKeyOf(r.Context(), st, r.Header.Get("X-API-Key"))
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	if k == nil {
		if client == "" {
			client = guardKey(clientAddr(r, s.cfg.Proxies()), st.ID)
		}
		s.keys.failed(r.Context(), client, s.now())
		writeError(w, errUnauthorized)
		return
	}
	if e := s.overKeyBudget(r.Context(), st, k); e != nil {
		writeError(w, e)
		return
	}
	s.keyUsed(r.Context(), st, k)
	h(w, r, st)
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
