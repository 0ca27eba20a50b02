package main

import (
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

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

// apply sets the fields c gives on e, updated at now (unix seconds). A
// request that disables e, creation with enabled false included, makes
// its reason manual; one that enables it clears the reason and e's
// failure window.
func (c *endpointChange) apply(e *webhook.Endpoint, now int64) {
	if c.url != nil {
		e.URL = *c.url
	}
	if c.description != nil {
		e.Description = *c.description
	}
	if c.events != nil {
		e.Events = c.events
	}
	if c.enabled != nil && *c.enabled != e.Enabled {
		e.Enabled = *c.enabled
		if e.Enabled {
			// Judged from its next attempts on, not by failures from
			// before the merchant turned it back on.
			e.DisabledReason, e.FailingSince = "", 0
		} else {
			e.DisabledReason = webhook.DisabledManual
		}
	}
	e.UpdatedAt = now
}

// validate checks the fields given; create requires url and events. A
// field that is null is as one left out, on create and PATCH alike.
func (s *server) validateEndpoint(req *endpointRequest, create bool) (c endpointChange, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	given := func(name string, raw json.RawMessage) bool { return usable(name, raw, bad) }
	if given("url", req.URL) {
		var u string
		if json.Unmarshal(req.URL, &u) != nil {
			bad("url", "must be a string")
		} else if msg := s.checkWebhookURL(u); msg != "" {
			bad("url", msg)
		} else {
			c.url = &u
		}
	} else if create && absent(req.URL) {
		bad("url", "is required")
	}
	if given("description", req.Description) {
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
	if given("events", req.Events) {
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
	} else if create && absent(req.Events) {
		bad("events", "is required")
	}
	if given("enabled", req.Enabled) {
		var b bool
		if json.Unmarshal(req.Enabled, &b) != nil {
			bad("enabled", "must be true or false")
		} else {
			c.enabled = &b
		}
	}
	return c, fields
}

// absent reports whether a field of a request was left out or null.
func absent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// usable reports whether a field of a request is given and valid Unicode,
// telling bad when it is given but not: JSON is UTF-8 (RFC 8259 §8.1),
// and encoding/json would decode the bad bytes to U+FFFD without a word.
func usable(name string, raw json.RawMessage, bad func(field, msg string)) bool {
	if absent(raw) {
		return false
	}
	if !validUnicode(raw) {
		bad(name, "must be valid UTF-8 (an escaped surrogate must be half of a pair)")
		return false
	}
	return true
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
	hk.Mu.Lock()
	if len(hk.ByStore[st.ID]) >= webhook.MaxEndpointsPerStore {
		hk.Mu.Unlock()
		writeError(w, validationError([]fieldError{{"url", endpointCapMessage}}))
		return
	}
	made := time.Now()
	now := made.Unix()
	e := &webhook.Endpoint{ID: webhook.NewID("we_"), StoreID: st.ID, Enabled: true, CreatedAt: now, CreatedNS: made.UnixNano(), Secret: webhook.NewSecret()}
	c.apply(e, now)
	hk.AddEndpointLocked(e)
	hk.TouchLocked(webhook.KindEndpoint, e.ID)
	v := e.View()
	v["secret"] = e.Secret
	hk.Mu.Unlock()
	w.Header().Set("Cache-Control", "no-store") // it shows the secret
	writeJSON(w, http.StatusCreated, map[string]any{"data": v})
}

func (s *server) handleListEndpoints(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	hk := s.hooks
	hk.Mu.Lock()
	list := []map[string]any{}
	for _, e := range hk.ByStore[st.ID] {
		list = append(list, e.View())
	}
	hk.Mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"data": list})
}

func (s *server) handleGetEndpoint(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	writeJSON(w, http.StatusOK, map[string]any{"data": e.View()})
}

func (s *server) handleGetSecret(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"secret": e.Secret}})
}

func (s *server) handlePatchEndpoint(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
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
		s.hooks.DropQueuedLocked(e, webhook.DropAll)
	case c.events != nil:
		s.hooks.DropQueuedLocked(e, e.RefusesLocked)
	}
	s.hooks.TouchLocked(webhook.KindEndpoint, e.ID)
	writeJSON(w, http.StatusOK, map[string]any{"data": e.View()})
}

func (s *server) handleDeleteEndpoint(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	s.hooks.RemoveEndpointLocked(e)
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) handleRotateSecret(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	now := time.Now()
	e.OldSecret, e.OldSecretEnd = e.Secret, now.Add(s.cfg.Webhooks.SecretRotationGrace.D()).Unix()
	e.Secret = webhook.NewSecret()
	e.UpdatedAt = now.Unix()
	s.hooks.TouchLocked(webhook.KindEndpoint, e.ID)
	// The answer shows the new secret, as creation shows the first
	// (rotating makes a new secret and returns it).
	v := e.View()
	v["secret"] = e.Secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// endpointCapMessage is the url field's error of an endpoint past the
// store's 5 (webhook.MaxEndpointsPerStore).
const endpointCapMessage = "this store already has 5 webhook endpoints, the most allowed; delete one first"

func (s *server) handleTestEndpoint(w http.ResponseWriter, r *http.Request, e *webhook.Endpoint) {
	hk := s.hooks
	ev := hk.NewEventLocked(webhook.EventTest, json.RawMessage(`{"id":"test","message":"This is a test event from the webhook settings."}`))
	if !hk.RoomLocked(e.StoreID, 1, len(ev.Body)) {
		writeError(w, errOverBudget)
		return
	}
	d := hk.EnqueueLocked(e, ev)
	d.Explicit, d.WhileDisabled = true, !e.Enabled // goes even to a disabled endpoint, once
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": ev.ID, "delivery_id": d.ID}})
}
