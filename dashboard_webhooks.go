package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"deeplink/internal/webhook"
)

// The dashboard's Webhooks and Deliveries pages. Every change goes through
// the API handler that makes it (server.call): one implementation of each
// rule.

func (s *server) dashWebhookRoutes(mux *http.ServeMux) {
	const ep = "/dashboard/webhooks/{endpoint_id}"
	get := func(p string, h func(http.ResponseWriter, *http.Request, *dashSession)) {
		mux.HandleFunc("GET "+p, s.dashHeaders(s.signedIn(h)))
	}
	post := func(p string, h func(http.ResponseWriter, *http.Request, *dashSession)) {
		mux.HandleFunc("POST "+p, s.dashHeaders(s.dashChange(s.signedIn(h))))
	}
	get("/dashboard/webhooks", s.dashEndpoints)
	get("/dashboard/webhooks/new", s.dashEndpointForm)
	post("/dashboard/webhooks/new", s.dashSaveEndpoint)
	get(ep+"/edit", s.dashEndpointForm)
	post(ep+"/edit", s.dashSaveEndpoint)
	post(ep+"/enable", s.dashSetEnabled(true))
	post(ep+"/disable", s.dashSetEnabled(false))
	get(ep+"/delete", s.dashConfirmDelete)
	post(ep+"/delete", s.dashDelete)
	post(ep+"/secret", s.dashReveal)
	post(ep+"/rotate", s.dashRotate)
	get(ep+"/new-secret", s.dashNewSecret)
	post(ep+"/test", s.dashSendTest)
	get(ep+"/deliveries", s.dashDeliveries)
	get(ep+"/deliveries/{delivery_id}", s.dashDelivery)
	post(ep+"/deliveries/{delivery_id}/retry", s.dashRetry)
	post(ep+"/recover", s.dashRecover)
}

// endpointView is an endpoint as the API shows it.
type endpointView struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Description    string   `json:"description"`
	Events         []string `json:"events"`
	Enabled        bool     `json:"enabled"`
	DisabledReason string   `json:"disabled_reason"`
	CreatedAt      int64    `json:"created_at"`
	UpdatedAt      int64    `json:"updated_at"`
	Secret         string   `json:"secret"`

	Stats endpointStats `json:"-"`
}

// deliveryView is a delivery as the API's log shows it.
type deliveryView struct {
	ID                 string `json:"id"`
	EventID            string `json:"event_id"`
	EventType          string `json:"event_type"`
	Status             string `json:"status"`
	CreatedAt          int64  `json:"created_at"`
	AttemptCount       int    `json:"attempt_count"`
	NextAttemptAt      int64  `json:"next_attempt_at"`
	LastAttemptAt      int64  `json:"last_attempt_at"`
	LastResponseStatus int    `json:"last_response_status"`
	FailureReason      string `json:"failure_reason"`
	URL                string `json:"url"`
	RequestBody        string `json:"request_body"`
	Attempts           []struct {
		At             time.Time         `json:"at"` // the API's RFC 3339 with nanoseconds; shown as clock shows times
		URL            string            `json:"url"`
		RequestHeaders map[string]string `json:"request_headers"`
		RequestBody    string            `json:"request_body"`
		ResponseStatus int               `json:"response_status"`
		ResponseBody   string            `json:"response_body"`
		DurationMS     int64             `json:"duration_ms"`
		Error          string            `json:"error"`
	} `json:"attempts"`
}

func (s *server) page(sess *dashSession, title, nav string) map[string]any {
	return map[string]any{"Title": title, "Session": sess, "Store": sess.page(), "Nav": nav, "EventTypes": knownEvents}
}

// failed renders the error page for an answer of the API that is not a
// success, in the API's words.
func (s *server) failed(w http.ResponseWriter, sess *dashSession, a apiAnswer) {
	msg := "The change could not be made."
	if a.Error != nil {
		msg = a.Error.Message
		for _, f := range a.Error.Fields {
			msg += "; " + f.Field + " " + f.Message
		}
	}
	p := s.page(sess, "Not done", "")
	p["Message"] = msg
	if a.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5")
	}
	s.render(w, a.status, "error.html", p)
}

func (s *server) dashEndpoints(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	a := s.call(r.Context(), sess.Store, apiCall{method: "GET"}, s.handleListEndpoints)
	var list []endpointView
	if a.status != http.StatusOK || json.Unmarshal(a.Data, &list) != nil {
		s.failed(w, sess, a)
		return
	}
	now := time.Now()
	for i := range list {
		list[i].Stats = s.statsOf(r.Context(), sess.Store.ID, list[i].ID, now)
	}
	p := s.page(sess, "Webhooks", "webhooks")
	p["Endpoints"], p["Max"], p["Done"] = list, webhook.MaxEndpointsPerStore, doneMessage(r.URL.Query().Get("done"))
	s.render(w, http.StatusOK, "webhooks.html", p)
}

// doneMessage is the line a page shows after the change it was sent to
// from: fixed texts only, so a link cannot put words on the page.
func doneMessage(done string) string {
	return map[string]string{
		"saved":    "Endpoint saved.",
		"enabled":  "Endpoint enabled.",
		"disabled": "Endpoint disabled.",
		"deleted":  "Endpoint deleted.",
		"test":     "Test event sent. It shows below as soon as it is attempted.",
		"retry":    "Delivery queued again.",
		"recover":  "Failed deliveries queued again.",
		"none":     "No failed delivery since then: nothing to send again.",
	}[done]
}

func (s *server) endpointOf(r *http.Request, sess *dashSession) (endpointView, apiAnswer, bool) {
	a := s.call(r.Context(), sess.Store, apiCall{method: "GET", path: map[string]string{"endpoint_id": r.PathValue("endpoint_id")}}, s.handleGetEndpoint)
	var e endpointView
	ok := a.status == http.StatusOK && json.Unmarshal(a.Data, &e) == nil
	return e, a, ok
}

// dashEndpointForm is the form of a new endpoint, or of the path's.
func (s *server) dashEndpointForm(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	p := s.page(sess, "Add endpoint", "webhooks")
	e := endpointView{Enabled: true, Events: []string{webhook.EventOrderStatus}}
	if r.PathValue("endpoint_id") != "" {
		var a apiAnswer
		var ok bool
		if e, a, ok = s.endpointOf(r, sess); !ok {
			s.failed(w, sess, a)
			return
		}
		p["Title"] = "Edit endpoint"
	}
	p["Endpoint"] = e
	s.render(w, http.StatusOK, "endpoint.html", p)
}

// dashSaveEndpoint creates an endpoint, or changes the path's, from the
// form; a new endpoint's secret is shown once, right away.
func (s *server) dashSaveEndpoint(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	events := r.PostForm["events"]
	if events == nil {
		events = []string{}
	}
	body := map[string]any{
		"url": r.PostFormValue("url"), "description": r.PostFormValue("description"),
		"events": events, "enabled": r.PostFormValue("enabled") == "on",
	}
	id := r.PathValue("endpoint_id")
	var a apiAnswer
	if id == "" {
		a = s.call(r.Context(), sess.Store, apiCall{method: "POST", body: body}, s.handleCreateEndpoint)
	} else {
		a = s.call(r.Context(), sess.Store, apiCall{method: "PATCH", body: body, path: map[string]string{"endpoint_id": id}}, s.handlePatchEndpoint)
	}
	if a.status == http.StatusUnprocessableEntity && a.Error != nil {
		p := s.page(sess, "Add endpoint", "webhooks")
		if id != "" {
			p["Title"] = "Edit endpoint"
		}
		errs := map[string]string{}
		for _, f := range a.Error.Fields {
			errs[f.Field] = f.Message
		}
		if errs["url"] == endpointCapMessage {
			// The API names the url field; here it is the page's matter.
			p["Error"] = "T" + endpointCapMessage[1:] + "."
			delete(errs, "url")
		}
		p["Endpoint"] = endpointView{ID: id, URL: body["url"].(string), Description: body["description"].(string), Events: events, Enabled: body["enabled"].(bool)}
		p["Errors"] = errs
		s.render(w, http.StatusUnprocessableEntity, "endpoint.html", p)
		return
	}
	if a.status >= 300 {
		s.failed(w, sess, a)
		return
	}
	if id != "" {
		http.Redirect(w, r, "/dashboard/webhooks?done=saved", http.StatusSeeOther)
		return
	}
	var e endpointView
	json.Unmarshal(a.Data, &e)
	s.showSecretNext(w, r, sess, e.ID, "saved")
}

// showSecretNext sends the browser, after a change that made a secret
// (saved: a new endpoint; rotated), to the page that shows it once: a
// reload of that page neither repeats the change nor shows it again.
func (s *server) showSecretNext(w http.ResponseWriter, r *http.Request, sess *dashSession, id, what string) {
	exp := s.now().Add(5 * time.Minute)
	if err := s.store.Put(r.Context(), sess.key+":shown", []byte(what+"\x00"+id), exp); err != nil {
		s.dashUnavailable(w, sess)
		return
	}
	http.Redirect(w, r, "/dashboard/webhooks/"+url.PathEscape(id)+"/new-secret", http.StatusSeeOther)
}

// dashNewSecret shows, once, the secret that the change before it made;
// opened again, or otherwise, it goes to the Webhooks page.
func (s *server) dashNewSecret(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	v, err := s.store.Take(r.Context(), sess.key+":shown")
	what, id, _ := strings.Cut(string(v), "\x00")
	if err != nil || id != r.PathValue("endpoint_id") {
		http.Redirect(w, r, "/dashboard/webhooks", http.StatusSeeOther)
		return
	}
	e, a, ok := s.endpointOf(r, sess)
	if !ok {
		s.failed(w, sess, a)
		return
	}
	a = s.call(r.Context(), sess.Store, apiCall{method: "GET", path: map[string]string{"endpoint_id": e.ID}}, s.handleGetSecret)
	var sec struct {
		Secret string `json:"secret"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.Data, &sec) != nil {
		s.failed(w, sess, a)
		return
	}
	title := map[string]string{"saved": "Endpoint saved", "rotated": "New signing secret"}[what]
	p := s.page(sess, title, "webhooks")
	p["Endpoint"], p["Secret"], p["Saved"], p["Rotated"] = e, sec.Secret, what == "saved", what == "rotated"
	s.render(w, http.StatusOK, "secret.html", p)
}

// dashRotate makes a new secret for the endpoint, then shows it once.
func (s *server) dashRotate(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	id := r.PathValue("endpoint_id")
	a := s.call(r.Context(), sess.Store, apiCall{method: "POST", path: map[string]string{"endpoint_id": id}}, s.handleRotateSecret)
	if a.status != http.StatusOK {
		s.failed(w, sess, a)
		return
	}
	s.showSecretNext(w, r, sess, id, "rotated")
}

func (s *server) dashSetEnabled(on bool) func(http.ResponseWriter, *http.Request, *dashSession) {
	done := map[bool]string{true: "enabled", false: "disabled"}[on]
	return func(w http.ResponseWriter, r *http.Request, sess *dashSession) {
		a := s.call(r.Context(), sess.Store, apiCall{method: "PATCH", body: map[string]any{"enabled": on},
			path: map[string]string{"endpoint_id": r.PathValue("endpoint_id")}}, s.handlePatchEndpoint)
		if a.status != http.StatusOK {
			s.failed(w, sess, a)
			return
		}
		http.Redirect(w, r, "/dashboard/webhooks?done="+done, http.StatusSeeOther)
	}
}

func (s *server) dashConfirmDelete(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	e, a, ok := s.endpointOf(r, sess)
	if !ok {
		s.failed(w, sess, a)
		return
	}
	p := s.page(sess, "Delete endpoint", "webhooks")
	p["Endpoint"] = e
	s.render(w, http.StatusOK, "delete.html", p)
}

func (s *server) dashDelete(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	a := s.call(r.Context(), sess.Store, apiCall{method: "DELETE", path: map[string]string{"endpoint_id": r.PathValue("endpoint_id")}}, s.handleDeleteEndpoint)
	if a.status != http.StatusNoContent {
		s.failed(w, sess, a)
		return
	}
	http.Redirect(w, r, "/dashboard/webhooks?done=deleted", http.StatusSeeOther)
}

// dashReveal shows the endpoint's secret: only in answer to a POST, never
// in a page a link opens.
func (s *server) dashReveal(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	e, a, ok := s.endpointOf(r, sess)
	if !ok {
		s.failed(w, sess, a)
		return
	}
	a = s.call(r.Context(), sess.Store, apiCall{method: "GET", path: map[string]string{"endpoint_id": e.ID}}, s.handleGetSecret)
	var v struct {
		Secret string `json:"secret"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.Data, &v) != nil {
		s.failed(w, sess, a)
		return
	}
	p := s.page(sess, "Signing secret", "webhooks")
	p["Endpoint"], p["Secret"] = e, v.Secret
	s.render(w, http.StatusOK, "secret.html", p)
}

func (s *server) dashSendTest(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	id := r.PathValue("endpoint_id")
	a := s.call(r.Context(), sess.Store, apiCall{method: "POST", path: map[string]string{"endpoint_id": id}}, s.handleTestEndpoint)
	if a.status != http.StatusAccepted {
		s.failed(w, sess, a)
		return
	}
	http.Redirect(w, r, "/dashboard/webhooks/"+url.PathEscape(id)+"/deliveries?done=test", http.StatusSeeOther)
}

// dashDeliveries is an endpoint's delivery log, filtered as the API's. With
// partial=rows it is the table's rows alone, which the page's script
// fetches again while some delivery is pending.
func (s *server) dashDeliveries(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	e, a, ok := s.endpointOf(r, sess)
	if !ok {
		s.failed(w, sess, a)
		return
	}
	q := r.URL.Query()
	api := url.Values{}
	for _, k := range []string{"event_type", "status", "cursor"} {
		if v := q.Get(k); v != "" {
			api.Set(k, v)
		}
	}
	api.Set("limit", "50")
	a = s.call(r.Context(), sess.Store, apiCall{method: "GET", query: api, path: map[string]string{"endpoint_id": e.ID}}, s.handleListDeliveries)
	var list []deliveryView
	if a.status != http.StatusOK || json.Unmarshal(a.Data, &list) != nil {
		s.failed(w, sess, a)
		return
	}
	pending := false
	for _, d := range list {
		pending = pending || d.Status == webhook.StatusPending
	}
	p := s.page(sess, "Deliveries", "webhooks")
	p["Endpoint"], p["Deliveries"], p["Pending"] = e, list, pending
	p["EventType"], p["Status"], p["Statuses"] = q.Get("event_type"), q.Get("status"), []string{webhook.StatusSucceeded, webhook.StatusFailed, webhook.StatusPending}
	p["Done"] = doneMessage(q.Get("done"))
	if a.Next != "" {
		older := url.Values{}
		for k, v := range api {
			older[k] = v
		}
		older.Del("limit")
		older.Set("cursor", a.Next)
		p["Older"] = "?" + older.Encode()
	}
	if q.Get("partial") == "rows" {
		s.render(w, http.StatusOK, "rows", p)
		return
	}
	s.render(w, http.StatusOK, "deliveries.html", p)
}

func (s *server) dashDelivery(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	e, a, ok := s.endpointOf(r, sess)
	if !ok {
		s.failed(w, sess, a)
		return
	}
	a = s.call(r.Context(), sess.Store, apiCall{method: "GET", path: map[string]string{"endpoint_id": e.ID, "delivery_id": r.PathValue("delivery_id")}}, s.handleGetDelivery)
	var d deliveryView
	if a.status != http.StatusOK || json.Unmarshal(a.Data, &d) != nil {
		s.failed(w, sess, a)
		return
	}
	p := s.page(sess, "Delivery", "webhooks")
	p["Endpoint"], p["Delivery"] = e, d
	s.render(w, http.StatusOK, "delivery.html", p)
}

func (s *server) dashRetry(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	id := r.PathValue("endpoint_id")
	a := s.call(r.Context(), sess.Store, apiCall{method: "POST", path: map[string]string{"endpoint_id": id, "delivery_id": r.PathValue("delivery_id")}}, s.handleRetryDelivery)
	if a.status != http.StatusAccepted {
		s.failed(w, sess, a)
		return
	}
	http.Redirect(w, r, "/dashboard/webhooks/"+url.PathEscape(id)+"/deliveries?done=retry", http.StatusSeeOther)
}

// dashRecover sends again the endpoint's failed deliveries since the
// form's time: the browser's local time as RFC 3339 when its script ran
// (since_rfc3339), else the field's date and time taken as UTC.
func (s *server) dashRecover(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	id := r.PathValue("endpoint_id")
	since := r.PostFormValue("since_rfc3339")
	if since == "" {
		for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04"} {
			if t, err := time.Parse(layout, r.PostFormValue("since")); err == nil {
				since = t.UTC().Format(time.RFC3339)
				break
			}
		}
	}
	a := s.call(r.Context(), sess.Store, apiCall{method: "POST", body: map[string]string{"since": since}, path: map[string]string{"endpoint_id": id}}, s.handleRecover)
	var v struct {
		Queued int `json:"queued"`
	}
	if a.status != http.StatusAccepted || json.Unmarshal(a.Data, &v) != nil {
		s.failed(w, sess, a)
		return
	}
	done := "recover"
	if v.Queued == 0 {
		done = "none"
	}
	http.Redirect(w, r, "/dashboard/webhooks/"+url.PathEscape(id)+"/deliveries?done="+done, http.StatusSeeOther)
}
