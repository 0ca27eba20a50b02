package main

import (
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// validate checks the fields given; create requires url and events. A
// field that is null is as one left out, on create and PATCH alike.
func (s *server) validateEndpoint(req *endpointRequest, create bool) (c webhook.EndpointChange, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	given := func(name string, raw json.RawMessage) bool { return usable(name, raw, bad) }
	if given("url", req.URL) {
		var u string
		if json.Unmarshal(req.URL, &u) != nil {
			bad("url", "must be a string")
		} else if msg := s.checkWebhookURL(u); msg != "" {
			bad("url", msg)
		} else {
			c.URL = &u
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
			c.Description = &d
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
			c.Events = slices.Compact(evs)
		}
	} else if create && absent(req.Events) {
		bad("events", "is required")
	}
	if given("enabled", req.Enabled) {
		var b bool
		if json.Unmarshal(req.Enabled, &b) != nil {
			bad("enabled", "must be true or false")
		} else {
			c.Enabled = &b
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
	if !s.writable(w, r) {
		return
	}
	var req endpointRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	c, fields := s.validateEndpoint(&req, true)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	v, err := s.hooks.CreateEndpoint(r.Context(), st.ID, c)
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	w.Header().Set("Cache-Control", "no-store") // it shows the secret
	writeJSON(w, http.StatusCreated, map[string]any{"data": v})
}

func (s *server) handleListEndpoints(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	list, err := s.hooks.StoreEndpoints(r.Context(), st.ID)
	if err != nil {
		s.writeHookError(w, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": list})
}

func (s *server) handleGetEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.hooks.Endpoint(r.Context(), st.ID, r.PathValue("endpoint_id"))
	if err != nil {
		s.writeHookError(w, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

func (s *server) handleGetSecret(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	secret, err := s.hooks.Secret(r.Context(), st.ID, r.PathValue("endpoint_id"))
	if err != nil {
		s.writeHookError(w, err, false)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"secret": secret}})
}

// knownEndpoint answers 404, or 503 when the state cannot be read, unless
// the store has the endpoint of the path: for the changes whose body is
// checked, so that an unknown endpoint is 404 whatever the body.
func (s *server) knownEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) bool {
	if _, err := s.hooks.Endpoint(r.Context(), st.ID, r.PathValue("endpoint_id")); err != nil {
		s.writeHookError(w, err, false)
		return false
	}
	return true
}

func (s *server) handlePatchEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.knownEndpoint(w, r, st) || !s.writable(w, r) {
		return
	}
	var req endpointRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	c, fields := s.validateEndpoint(&req, false)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	v, err := s.hooks.ChangeEndpoint(r.Context(), st.ID, r.PathValue("endpoint_id"), c)
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

func (s *server) handleDeleteEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if err := s.hooks.DeleteEndpoint(r.Context(), st.ID, r.PathValue("endpoint_id")); err != nil {
		s.writeHookError(w, err, true)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) handleRotateSecret(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.hooks.RotateSecret(r.Context(), st.ID, r.PathValue("endpoint_id"))
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	// The answer shows the new secret, as creation shows the first.
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

// endpointCapMessage is the url field's error of an endpoint past the
// store's 5 (webhook.MaxEndpointsPerStore): the engine's words.
var endpointCapMessage = webhook.ErrEndpointCap.Error()

func (s *server) handleTestEndpoint(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	evt, dlv, err := s.hooks.SendTest(r.Context(), st.ID, r.PathValue("endpoint_id"))
	if err != nil {
		s.writeHookError(w, err, true)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"data": map[string]string{"id": evt, "delivery_id": dlv}})
}
