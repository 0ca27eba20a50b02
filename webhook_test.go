package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store"
	"deeplink/internal/webhook"
)

// Tests of the webhook management, publish and delivery log API (API.md §5),
// all through the real mux. Helpers shared with dispatch_test.go live here;
// every name starts with "wh" so they cannot collide with other test files
// of package main.

const (
	whStoreA = "0a5e0c3e-1111-4000-8000-00000000000a"
	whKeyA   = "ak_test_webhooks_store_a"
	whStoreB = "0b5e0c3e-2222-4000-8000-00000000000b"
	whKeyB   = "ak_test_webhooks_store_b"

	whWait = 5 * time.Second // upper bound for any awaited outcome
)

// whConf is the webhook part of a test configuration.
type whConf struct {
	Timeout  string
	Retry    []string
	Grace    string
	Insecure bool
	CAFile   string
	DataDir  string // t.TempDir() when empty
	LogSize  int    // delivery_log_size; the default when 0
	NoStoreB bool   // configure store A only

	DisableAfter string    // webhooks.disable_after; the default when empty
	Log          io.Writer // the service's log; discarded when nil
	Proxies      []string  // trusted_proxies
}

// whFast is the configuration most tests use: short timeout and retries.
// allow_insecure_urls is on because test receivers listen on 127.0.0.1.
func whFast() whConf {
	return whConf{Timeout: "300ms", Retry: []string{"20ms", "20ms", "20ms"}, Grace: "24h", Insecure: true}
}

// whParseConfig builds a configuration file with two stores and parses it
// as the service would.
func whParseConfig(t *testing.T, c whConf) *Config {
	t.Helper()
	doc := map[string]any{
		"listen":   "127.0.0.1:0",
		"data_dir": c.DataDir,
		"webhooks": map[string]any{
			"timeout":               c.Timeout,
			"retry_schedule":        c.Retry,
			"secret_rotation_grace": c.Grace,
			"allow_insecure_urls":   c.Insecure,
			"trusted_ca_file":       c.CAFile,
		},
		"stores": []map[string]any{
			{"id": whStoreA, "name": "A", "api_keys": []string{whKeyA}},
			{"id": whStoreB, "name": "B", "api_keys": []string{whKeyB}},
		},
	}
	if c.LogSize > 0 {
		doc["webhooks"].(map[string]any)["delivery_log_size"] = c.LogSize
	}
	if c.DisableAfter != "" {
		doc["webhooks"].(map[string]any)["disable_after"] = c.DisableAfter
	}
	if c.NoStoreB {
		doc["stores"] = doc["stores"].([]map[string]any)[:1]
	}
	if c.Proxies != nil {
		doc["trusted_proxies"] = c.Proxies
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	cfg, err := ParseConfig(b)
	require.NoError(t, err)
	return cfg
}

// whApp is a running service behind an httptest server.
type whApp struct {
	t      *testing.T
	cfg    *Config
	app    *app
	srv    *httptest.Server
	closed bool
}

// whStart starts the whole service with c, on a clock that advance moves;
// it is closed at cleanup unless the test closed it already.
func whStart(t *testing.T, c whConf) *whApp {
	t.Helper()
	if c.DataDir == "" {
		c.DataDir = t.TempDir()
	}
	cfg := whParseConfig(t, c)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if c.Log != nil {
		log = newLogger(c.Log)
	}
	clock := &testClock{}
	a, err := newAppAt(cfg, log, false, clock.now)
	require.NoError(t, err)
	clocks.Store(a, clock)
	w := &whApp{t: t, cfg: cfg, app: a, srv: httptest.NewServer(a.srv.handler())}
	t.Cleanup(w.close)
	return w
}

// close stops serving, then the dispatcher, and writes the state.
func (w *whApp) close() {
	if w.closed {
		return
	}
	w.closed = true
	w.srv.Close()
	assert.NoError(w.t, w.app.Close())
}

// whReq is one API request. body is sent as is when a string, JSON-encoded
// otherwise; ctype defaults to application/json when there is a body.
type whReq struct {
	method, path, key string
	body              any
	ctype             string
	header            map[string]string
}

type whResp struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any // nil when the body is not a JSON object
}

// data is the "data" member of a success body as an object.
func (r whResp) data() map[string]any {
	m, _ := r.body["data"].(map[string]any)
	return m
}

// list is the "data" member of a list body.
func (r whResp) list() []map[string]any {
	var out []map[string]any
	for _, x := range r.body["data"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

// try sends q without failing the test, so it can run inside Eventually.
func (w *whApp) try(q whReq) (whResp, error) {
	var body io.Reader
	switch b := q.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return whResp{}, err
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(q.method, w.srv.URL+q.path, body)
	if err != nil {
		return whResp{}, err
	}
	if q.body != nil {
		ct := q.ctype
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if q.key != "" {
		req.Header.Set("X-API-Key", q.key)
	}
	for k, v := range q.header {
		req.Header.Set(k, v)
	}
	res, err := w.srv.Client().Do(req)
	if err != nil {
		return whResp{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return whResp{}, err
	}
	r := whResp{status: res.StatusCode, header: res.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r, nil
}

// do sends q and fails the test when the request cannot be made.
func (w *whApp) do(t *testing.T, q whReq) whResp {
	t.Helper()
	r, err := w.try(q)
	require.NoError(t, err)
	return r
}

// whRequireError checks an error answer of API.md §3 and returns the
// names of the invalid fields it lists.
func whRequireError(t *testing.T, r whResp, status int, code string) []string {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.raw)
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	e, ok := r.body["error"].(map[string]any)
	require.True(t, ok, "no error object in %s", r.raw)
	assert.Equal(t, code, e["code"], "body: %s", r.raw)
	assert.NotEmpty(t, e["message"])
	var names []string
	fields, _ := e["fields"].([]any)
	for _, f := range fields {
		names = append(names, f.(map[string]any)["field"].(string))
	}
	if status == http.StatusUnprocessableEntity {
		assert.NotEmpty(t, names, "a 422 lists its fields: %s", r.raw)
	}
	return names
}

func whHooksPath(store string) string { return "/stores/" + store + "/webhooks" }

func whEndpointPath(store, id string) string { return whHooksPath(store) + "/" + id }

// whCreate creates an endpoint in store and returns the 201 body's data.
func (w *whApp) whCreate(t *testing.T, store, key string, body map[string]any) map[string]any {
	t.Helper()
	r := w.do(t, whReq{method: "POST", path: whHooksPath(store), key: key, body: body})
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.raw)
	return r.data()
}

// whEndpoint creates an enabled endpoint of store A for url subscribed to
// order.status.updated and returns its id and secret.
func (w *whApp) whEndpoint(t *testing.T, url string) (id, secret string) {
	t.Helper()
	d := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": url, "events": []string{webhook.EventOrderStatus}})
	return d["id"].(string), d["secret"].(string)
}

// whOrder is a valid order.status.updated data object.
func whOrder(id, status string) map[string]any {
	return map[string]any{"object": map[string]any{"id": id, "status": status, "total": 1250}}
}

// whPublish publishes order.status.updated to store and returns the event id.
func (w *whApp) whPublish(t *testing.T, store, key string, data map[string]any, idemKey string) string {
	t.Helper()
	q := whReq{method: "POST", path: "/stores/" + store + "/events", key: key,
		body: map[string]any{"type": webhook.EventOrderStatus, "data": data}}
	if idemKey != "" {
		q.header = map[string]string{"Idempotency-Key": idemKey}
	}
	r := w.do(t, q)
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	id, _ := r.data()["id"].(string)
	require.True(t, strings.HasPrefix(id, "evt_"), "event id %q", id)
	return id
}

// whDeliveries lists store A's endpoint ep's delivery log with the query q.
func (w *whApp) whDeliveries(t *testing.T, ep, q string) []map[string]any {
	t.Helper()
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries" + q, key: whKeyA})
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
	return r.list()
}

// whDeliveryOf returns the id of the delivery of event evt to store A's
// endpoint ep. Deliveries are logged when the event is published.
func (w *whApp) whDeliveryOf(t *testing.T, ep, evt string) string {
	t.Helper()
	for _, d := range w.whDeliveries(t, ep, "?limit=100") {
		if d["event_id"] == evt {
			return d["id"].(string)
		}
	}
	t.Fatalf("no delivery of %s to %s in the log", evt, ep)
	return ""
}

// whAwait polls the delivery detail of store A's endpoint ep until ok
// accepts it, and returns it.
func (w *whApp) whAwait(t *testing.T, ep, dlv string, ok func(d map[string]any) bool) map[string]any {
	t.Helper()
	var mu sync.Mutex
	var last map[string]any
	cond := func() bool {
		r, err := w.try(whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlv, key: whKeyA})
		if err != nil || r.status != http.StatusOK {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		last = r.data()
		return ok(last)
	}
	if !assert.Eventually(t, cond, whWait, 10*time.Millisecond) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("delivery %s never reached the awaited state; last seen: %v", dlv, last)
	}
	mu.Lock()
	defer mu.Unlock()
	return last
}

// whAwaitStatus waits for a delivery to have status, e.g. "succeeded".
func (w *whApp) whAwaitStatus(t *testing.T, ep, dlv, status string) map[string]any {
	t.Helper()
	return w.whAwait(t, ep, dlv, func(d map[string]any) bool { return d["status"] == status })
}

// whAwaitWaiting checks that store A's endpoint ep's delivery dlv is
// pending after attempts attempts: queued, behind the endpoint's places
// (its in-flight limit), which the caller has seen all taken.
func (w *whApp) whAwaitWaiting(t *testing.T, ep, dlv string, attempts int) {
	t.Helper()
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlv, key: whKeyA})
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	require.Equal(t, webhook.StatusPending, r.data()["status"], "delivery %s", dlv)
	require.Len(t, whAttempts(t, r.data()), attempts, "attempts of delivery %s", dlv)
}

// whFailedAttempts creates an endpoint at url, publishes one order event,
// waits until its delivery to the endpoint has failed for good, and
// returns the attempts it logged.
func (w *whApp) whFailedAttempts(t *testing.T, url string) []map[string]any {
	t.Helper()
	ep, _ := w.whEndpoint(t, url)
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	return whAttempts(t, w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusFailed))
}

// whAttempts returns the attempts of a delivery detail.
func whAttempts(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	raw, ok := d["attempts"].([]any)
	require.True(t, ok, "no attempts list in %v", d)
	var out []map[string]any
	for _, a := range raw {
		out = append(out, a.(map[string]any))
	}
	return out
}

// whHit is one request a receiver got.
type whHit struct {
	n      int
	header http.Header
	body   []byte
}

// whReceiver is a merchant's server: it counts requests, reports each on
// hits, and answers as respond says (200 when respond is nil).
type whReceiver struct {
	*httptest.Server
	hits  chan whHit
	count atomic.Int32
}

// whRespond answers a receiver's request; h.n is its 1-based number.
type whRespond func(h whHit, w http.ResponseWriter, r *http.Request)

// whNewReceiver starts a receiver, over TLS when secure.
func whNewReceiver(t *testing.T, secure bool, respond whRespond) *whReceiver {
	t.Helper()
	rc := &whReceiver{hits: make(chan whHit, 1000)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hit := whHit{n: int(rc.count.Add(1)), header: r.Header.Clone(), body: body}
		select {
		case rc.hits <- hit:
		default:
		}
		if respond == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		respond(hit, w, r)
	})
	if secure {
		rc.Server = httptest.NewTLSServer(h)
	} else {
		rc.Server = httptest.NewServer(h)
	}
	t.Cleanup(rc.Close)
	return rc
}

// next waits up to within for the receiver's next request.
func (rc *whReceiver) next(t *testing.T, within time.Duration) whHit {
	t.Helper()
	select {
	case h := <-rc.hits:
		return h
	case <-time.After(within):
		t.Fatalf("the receiver got no request within %v (count %d)", within, rc.count.Load())
	}
	return whHit{}
}

// whReleaseAtEnd returns a channel closed at cleanup, for receivers that
// block until the test ends. Call it after creating the receiver that uses
// it, so it is closed before that receiver's server is.
func whReleaseAtEnd(t *testing.T, ch chan struct{}) {
	t.Helper()
	t.Cleanup(func() { close(ch) })
}

// whBlock is a receiver answer that holds the request until release is
// closed or the client gives up.
func whBlock(release <-chan struct{}) whRespond {
	return func(_ whHit, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
}

// whCAFile writes the certificate of a TLS test server as a PEM file for
// trusted_ca_file.
func whCAFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "receiver-ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// whSignature splits X-Webhook-Signature into its timestamp and v1 values.
func whSignature(t *testing.T, header string) (ts string, v1 []string) {
	t.Helper()
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(part, "=")
		require.True(t, ok, "malformed signature part %q in %q", part, header)
		switch k {
		case "t":
			require.Empty(t, ts, "two timestamps in %q", header)
			ts = v
		case "v1":
			v1 = append(v1, v)
		default:
			t.Fatalf("unknown signature part %q in %q", part, header)
		}
	}
	require.NotEmpty(t, ts, "no t= in %q", header)
	return ts, v1
}

// whHMAC is the signature a merchant computes: HMAC-SHA256 keyed with the
// whole secret string over "<t>.<body>", in hex.
func whHMAC(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// whStdHMAC is the Standard Webhooks signature: HMAC-SHA256 keyed with the
// base64-decoded part of the secret over "<id>.<t>.<body>", as "v1,<base64>".
func whStdHMAC(t *testing.T, secret, id, ts string, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// --- management API -------------------------------------------------------

func TestEndpointLifecycle(t *testing.T) {
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h"})
	start := time.Now().Unix()

	created := w.whCreate(t, whStoreA, whKeyA, map[string]any{
		"url": "https://hooks.example.com/a", "description": "orders", "events": []string{webhook.EventOrderStatus},
	})
	id, _ := created["id"].(string)
	secret, _ := created["secret"].(string)
	require.True(t, strings.HasPrefix(id, "we_"), "id %q", id)
	require.True(t, strings.HasPrefix(secret, "whsec_"), "secret %q", secret)
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err, "the secret is whsec_ + base64")
	assert.Len(t, raw, 32)
	assert.Equal(t, "https://hooks.example.com/a", created["url"])
	assert.Equal(t, "orders", created["description"])
	assert.Equal(t, []any{webhook.EventOrderStatus}, created["events"])
	assert.Equal(t, true, created["enabled"])
	assert.GreaterOrEqual(t, created["created_at"], float64(start))
	assert.Equal(t, created["created_at"], created["updated_at"])

	// Listing and getting never show the secret.
	r := w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA})
	require.Equal(t, http.StatusOK, r.status)
	list := r.list()
	require.Len(t, list, 1)
	assert.Equal(t, id, list[0]["id"])
	assert.NotContains(t, list[0], "secret")
	assert.NotContains(t, string(r.raw), secret)

	r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA})
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, id, r.data()["id"])
	assert.NotContains(t, r.data(), "secret")
	assert.NotContains(t, string(r.raw), secret)
	for _, k := range []string{"id", "url", "description", "events", "enabled", "created_at", "updated_at"} {
		assert.Contains(t, r.data(), k)
	}

	r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id) + "/secret", key: whKeyA})
	require.Equal(t, http.StatusOK, r.status)
	assert.Equal(t, secret, r.data()["secret"])

	// The other store sees nothing of it.
	r = w.do(t, whReq{method: "GET", path: whHooksPath(whStoreB), key: whKeyB})
	require.Equal(t, http.StatusOK, r.status)
	assert.Empty(t, r.list())

	patches := []struct {
		name  string
		patch map[string]any
		field string
		want  any
	}{
		{"url", map[string]any{"url": "https://hooks.example.com/b"}, "url", "https://hooks.example.com/b"},
		{"description", map[string]any{"description": "all of them"}, "description", "all of them"},
		{"events", map[string]any{"events": []string{webhook.EventTest, webhook.EventOrderStatus}}, "events", []any{webhook.EventOrderStatus, webhook.EventTest}},
		{"disable", map[string]any{"enabled": false}, "enabled", false},
		{"enable", map[string]any{"enabled": true}, "enabled", true},
		// null is as absent: each changes nothing.
		{"url null", map[string]any{"url": nil}, "url", "https://hooks.example.com/b"},
		{"description null", map[string]any{"description": nil}, "description", "all of them"},
		{"events null", map[string]any{"events": nil}, "events", []any{webhook.EventOrderStatus, webhook.EventTest}},
		{"enabled null", map[string]any{"enabled": nil}, "enabled", true},
	}
	for _, tc := range patches {
		t.Run("patch "+tc.name, func(t *testing.T) {
			r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, id), key: whKeyA, body: tc.patch})
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
			assert.Equal(t, tc.want, r.data()[tc.field])
			assert.NotContains(t, r.data(), "secret")
			r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA})
			assert.Equal(t, tc.want, r.data()[tc.field], "the change is kept")
		})
	}
	// A PATCH changes only what it names.
	r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA})
	assert.Equal(t, "https://hooks.example.com/b", r.data()["url"])
	assert.Equal(t, "all of them", r.data()["description"])
	assert.Equal(t, []any{webhook.EventOrderStatus, webhook.EventTest}, r.data()["events"])

	r = w.do(t, whReq{method: "DELETE", path: whEndpointPath(whStoreA, id), key: whKeyA})
	require.Equal(t, http.StatusNoContent, r.status, "body: %s", r.raw)
	assert.Empty(t, r.raw)
	for _, q := range []whReq{
		{method: "GET", path: whEndpointPath(whStoreA, id)},
		{method: "GET", path: whEndpointPath(whStoreA, id) + "/secret"},
		{method: "DELETE", path: whEndpointPath(whStoreA, id)},
		{method: "GET", path: whEndpointPath(whStoreA, id) + "/deliveries"},
	} {
		q.key = whKeyA
		whRequireError(t, w.do(t, q), http.StatusNotFound, "not_found")
	}
	r = w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA})
	assert.Empty(t, r.list())
}

func TestEndpointLimitPerStore(t *testing.T) {
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h"})
	body := map[string]any{"url": "https://hooks.example.com/x", "events": []string{webhook.EventOrderStatus}}
	var made []string
	for range webhook.MaxEndpointsPerStore {
		made = append(made, w.whCreate(t, whStoreA, whKeyA, body)["id"].(string))
	}
	r := w.do(t, whReq{method: "POST", path: whHooksPath(whStoreA), key: whKeyA, body: body})
	whRequireError(t, r, http.StatusUnprocessableEntity, "validation_failed")
	r = w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA})
	var listed []string
	for _, e := range r.list() {
		listed = append(listed, e["id"].(string))
	}
	assert.Equal(t, made, listed, "listed in the order they were made, made within a second")

	// The limit is per store, and deleting one makes room again.
	w.whCreate(t, whStoreB, whKeyB, body)
	id := r.list()[0]["id"].(string)
	require.Equal(t, http.StatusNoContent, w.do(t, whReq{method: "DELETE", path: whEndpointPath(whStoreA, id), key: whKeyA}).status)
	w.whCreate(t, whStoreA, whKeyA, body)
}

func TestEndpointCreateInvalid(t *testing.T) {
	// allow_insecure_urls is off here: http URLs must be refused.
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h"})
	okEvents := []string{webhook.EventOrderStatus}
	cases := []struct {
		name       string
		q          whReq
		status     int
		code       string
		wantFields []string
	}{
		{"http url", whReq{body: map[string]any{"url": "http://hooks.example.com/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"userinfo", whReq{body: map[string]any{"url": "https://user:pw@hooks.example.com/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"user only", whReq{body: map[string]any{"url": "https://user@hooks.example.com/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"fragment", whReq{body: map[string]any{"url": "https://hooks.example.com/h#x", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"empty fragment", whReq{body: map[string]any{"url": "https://hooks.example.com/h#", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"port over 65535", whReq{body: map[string]any{"url": "https://hooks.example.com:99999/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"port 0", whReq{body: map[string]any{"url": "https://hooks.example.com:0/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"empty port", whReq{body: map[string]any{"url": "https://hooks.example.com:/", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"url over 2048", whReq{body: map[string]any{"url": "https://hooks.example.com/" + strings.Repeat("a", 2049-len("https://hooks.example.com/")), "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"relative url", whReq{body: map[string]any{"url": "/hooks", "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"url not a string", whReq{body: map[string]any{"url": 7, "events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"missing url", whReq{body: map[string]any{"events": okEvents}}, 422, "validation_failed", []string{"url"}},
		{"events empty", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": []string{}}}, 422, "validation_failed", []string{"events"}},
		{"events unknown", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": []string{"order.created"}}}, 422, "validation_failed", []string{"events"}},
		{"events not a list", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": webhook.EventOrderStatus}}, 422, "validation_failed", []string{"events"}},
		{"missing events", whReq{body: map[string]any{"url": "https://hooks.example.com/"}}, 422, "validation_failed", []string{"events"}},
		{"enabled not a bool", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents, "enabled": "yes"}}, 422, "validation_failed", []string{"enabled"}},
		{"every bad field listed", whReq{body: map[string]any{"url": "http://x/", "events": []string{}}}, 422, "validation_failed", []string{"url", "events"}},
		{"description too long", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents, "description": strings.Repeat("d", 1025)}}, 422, "validation_failed", []string{"description"}},
		{"body over 64 KiB", whReq{body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents, "description": strings.Repeat("d", 65<<10)}}, 413, "body_too_large", nil},
		{"not JSON", whReq{body: "url=https://hooks.example.com/"}, 400, "invalid_json", nil},
		{"JSON array", whReq{body: "[]"}, 400, "invalid_json", nil},
		{"invalid UTF-8 in a field", whReq{body: "{\"url\":\"https://hooks.example.com/\",\"events\":[\"order.status.updated\"],\"description\":\"caf\xe9\"}"}, 422, "validation_failed", []string{"description"}},
		{"wrong content type", whReq{body: `{"url":"https://hooks.example.com/","events":["order.status.updated"]}`, ctype: "text/plain"}, 415, "unsupported_media_type", nil},
		{"missing key", whReq{key: "-", body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents}}, 401, "unauthorized", nil},
		{"wrong key", whReq{key: "ak_wrong", body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents}}, 401, "unauthorized", nil},
		{"other store's key", whReq{key: whKeyB, body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents}}, 401, "unauthorized", nil},
		{"unknown store", whReq{path: whHooksPath("0c5e0c3e-3333-4000-8000-00000000000c"), body: map[string]any{"url": "https://hooks.example.com/", "events": okEvents}}, 404, "store_not_found", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.method = "POST"
			if q.path == "" {
				q.path = whHooksPath(whStoreA)
			}
			switch q.key {
			case "":
				q.key = whKeyA
			case "-":
				q.key = ""
			}
			fields := whRequireError(t, w.do(t, q), tc.status, tc.code)
			for _, f := range tc.wantFields {
				assert.Contains(t, fields, f)
			}
		})
	}
	r := w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA})
	assert.Empty(t, r.list(), "no invalid request created an endpoint")

	// Parameters on the media type are fine, and so is the longest URL,
	// counted in characters, not bytes.
	for _, c := range []string{"a", "é"} {
		long := "https://hooks.example.com/" + strings.Repeat(c, 2048-len("https://hooks.example.com/"))
		r = w.do(t, whReq{method: "POST", path: whHooksPath(whStoreA), key: whKeyA, ctype: "application/json; charset=utf-8",
			body: map[string]any{"url": long, "events": okEvents}})
		require.Equal(t, http.StatusCreated, r.status, "URL of 2048 %q: body: %s", c, r.raw)
	}
	long := "https://hooks.example.com/" + strings.Repeat("é", 2049-len("https://hooks.example.com/"))
	r = w.do(t, whReq{method: "POST", path: whHooksPath(whStoreA), key: whKeyA, body: map[string]any{"url": long, "events": okEvents}})
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "URL of 2049 characters: body: %s", r.raw)
}

func TestEndpointPatchInvalid(t *testing.T) {
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h"})
	id := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": "https://hooks.example.com/", "events": []string{webhook.EventOrderStatus}})["id"].(string)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
		field  string
	}{
		{"http url", map[string]any{"url": "http://hooks.example.com/"}, 422, "validation_failed", "url"},
		{"events empty", map[string]any{"events": []string{}}, 422, "validation_failed", "events"},
		{"events unknown", map[string]any{"events": []string{"nope"}}, 422, "validation_failed", "events"},
		{"not JSON", "{", 400, "invalid_json", ""},
		{"invalid UTF-8 in a field", "{\"description\":\"caf\xe9\"}", 422, "validation_failed", "description"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, whReq{method: "PATCH", path: whEndpointPath(whStoreA, id), key: whKeyA, body: tc.body})
			fields := whRequireError(t, r, tc.status, tc.code)
			if tc.field != "" {
				assert.Contains(t, fields, tc.field)
			}
		})
	}
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA})
	assert.Equal(t, "https://hooks.example.com/", r.data()["url"], "a refused PATCH changes nothing")
	assert.Equal(t, []any{webhook.EventOrderStatus}, r.data()["events"])
}

// TestEndpointOfOtherStore: an endpoint id is found only under its own store.
func TestEndpointOfOtherStore(t *testing.T) {
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h"})
	id := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": "https://hooks.example.com/", "events": []string{webhook.EventOrderStatus}})["id"].(string)
	routes := []struct{ method, suffix string }{
		{"GET", ""}, {"GET", "/secret"}, {"PATCH", ""}, {"DELETE", ""}, {"POST", "/rotate-secret"},
		{"POST", "/test"}, {"GET", "/deliveries"}, {"GET", "/deliveries/dlv_x"}, {"POST", "/deliveries/dlv_x/retry"},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.suffix, func(t *testing.T) {
			q := whReq{method: rt.method, path: whEndpointPath(whStoreB, id) + rt.suffix, key: whKeyB}
			if rt.method == "PATCH" {
				q.body = map[string]any{"enabled": false}
			}
			whRequireError(t, w.do(t, q), http.StatusNotFound, "not_found")
			q.path, q.key = whEndpointPath(whStoreA, id)+rt.suffix, ""
			whRequireError(t, w.do(t, q), http.StatusUnauthorized, "unauthorized")
			q.path = whEndpointPath("0c5e0c3e-3333-4000-8000-00000000000c", id) + rt.suffix
			whRequireError(t, w.do(t, q), http.StatusNotFound, "store_not_found")
		})
	}
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA})
	require.Equal(t, http.StatusOK, r.status, "the endpoint is untouched")
	assert.Equal(t, true, r.data()["enabled"])
	whRequireError(t, w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, "we_unknown"), key: whKeyA}), 404, "not_found")
}

// --- publish --------------------------------------------------------------

func TestPublishValidation(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, rc.URL)
	obj := func(kv ...any) map[string]any {
		o := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			o[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"object": o}
	}
	cases := []struct {
		name  string
		body  any
		ctype string
		key   string
		want  int
		code  string
		field string
	}{
		{"unknown type", map[string]any{"type": "order.created", "data": obj("id", "o1", "status", "pending")}, "", "", 422, "validation_failed", "type"},
		{"webhook.test published directly", map[string]any{"type": webhook.EventTest, "data": obj("id", "o1", "status", "pending")}, "", "", 422, "validation_failed", "type"},
		{"type missing", map[string]any{"data": obj("id", "o1", "status", "pending")}, "", "", 422, "validation_failed", "type"},
		{"type not a string", map[string]any{"type": 3, "data": obj("id", "o1", "status", "pending")}, "", "", 422, "validation_failed", "type"},
		{"data missing", map[string]any{"type": webhook.EventOrderStatus}, "", "", 422, "validation_failed", "data"},
		{"data.object missing", map[string]any{"type": webhook.EventOrderStatus, "data": map[string]any{}}, "", "", 422, "validation_failed", "data.object"},
		{"data.object not an object", map[string]any{"type": webhook.EventOrderStatus, "data": map[string]any{"object": "o1"}}, "", "", 422, "validation_failed", "data.object"},
		{"id missing", map[string]any{"type": webhook.EventOrderStatus, "data": obj("status", "pending")}, "", "", 422, "validation_failed", "data.object.id"},
		{"id not a string", map[string]any{"type": webhook.EventOrderStatus, "data": obj("id", 17, "status", "pending")}, "", "", 422, "validation_failed", "data.object.id"},
		{"id empty", map[string]any{"type": webhook.EventOrderStatus, "data": obj("id", "", "status", "pending")}, "", "", 422, "validation_failed", "data.object.id"},
		{"status missing", map[string]any{"type": webhook.EventOrderStatus, "data": obj("id", "o1")}, "", "", 422, "validation_failed", "data.object.status"},
		{"status unknown", map[string]any{"type": webhook.EventOrderStatus, "data": obj("id", "o1", "status", "shipped")}, "", "", 422, "validation_failed", "data.object.status"},
		{"data.object with a name twice", `{"type":"order.status.updated","data":{"object":{"id":"o1","status":"pending","status":"completed"}}}`, "", "", 400, "invalid_json", ""},
		{"data with object twice", `{"type":"order.status.updated","data":{"object":{"id":"o1","status":"pending"},"object":{}}}`, "", "", 400, "invalid_json", ""},
		{"Object for object", `{"type":"order.status.updated","data":{"Object":{"id":"o1","status":"pending"}}}`, "", "", 422, "validation_failed", "data.object"},
		{"a lone surrogate in data", `{"type":"order.status.updated","data":{"object":{"id":"o1\ud83d","status":"pending"}}}`, "", "", 422, "validation_failed", "data"},
		{"not JSON", "type=order.status.updated", "", "", 400, "invalid_json", ""},
		{"invalid UTF-8 in data", "{\"type\":\"order.status.updated\",\"data\":{\"object\":{\"id\":\"u\xff\xfe\",\"status\":\"pending\"}}}", "", "", 422, "validation_failed", "data"},
		{"wrong content type", `{"type":"order.status.updated","data":{"object":{"id":"o1","status":"pending"}}}`, "text/plain", "", 415, "unsupported_media_type", ""},
		{"missing key", map[string]any{"type": webhook.EventOrderStatus, "data": obj("id", "o1", "status", "pending")}, "", "-", 401, "unauthorized", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := whKeyA
			if tc.key == "-" {
				key = ""
			}
			r := w.do(t, whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: key, body: tc.body, ctype: tc.ctype})
			fields := whRequireError(t, r, tc.want, tc.code)
			if tc.field != "" {
				assert.Contains(t, fields, tc.field)
			}
		})
	}
	r := w.do(t, whReq{method: "POST", path: "/stores/0c5e0c3e-3333-4000-8000-00000000000c/events", key: whKeyA,
		body: map[string]any{"type": webhook.EventOrderStatus, "data": whOrder("o1", "pending")}})
	whRequireError(t, r, http.StatusNotFound, "store_not_found")

	// Every status of API.md §5 is accepted, with 202 and an evt_ id.
	for _, st := range orderStatuses {
		t.Run("status "+st, func(t *testing.T) {
			w.whPublish(t, whStoreA, whKeyA, whOrder("o-"+st, st), "")
		})
	}
	// Only the valid events were logged and reached the receiver.
	assert.Len(t, w.whDeliveries(t, ep, ""), len(orderStatuses))
	for range orderStatuses {
		h := rc.next(t, whWait)
		var env struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(h.body, &env))
		assert.Equal(t, webhook.EventOrderStatus, env.Type)
	}
}

func TestPublishIdempotency(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, rc.URL)
	rcB := whNewReceiver(t, false, nil)
	w.whCreate(t, whStoreB, whKeyB, map[string]any{"url": rcB.URL, "events": []string{webhook.EventOrderStatus}})

	first := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "key-1")
	again := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "completed"), "key-1")
	assert.Equal(t, first, again, "a repeated Idempotency-Key returns the first event's id")
	// Deliveries are logged when published: the repeat logged none.
	require.Len(t, w.whDeliveries(t, ep, ""), 1)

	other := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "completed"), "key-2")
	assert.NotEqual(t, first, other)
	// The key belongs to the store: store B's same key is a new event.
	inB := w.whPublish(t, whStoreB, whKeyB, whOrder("o1", "pending"), "key-1")
	assert.NotEqual(t, first, inB)
	rcB.next(t, whWait)

	// The receiver gets exactly the two distinct events of store A.
	var got []string
	for range 2 {
		h := rc.next(t, whWait)
		got = append(got, h.header.Get("Webhook-Id"))
	}
	assert.ElementsMatch(t, []string{first, other}, got)
	for _, evt := range []string{first, other} {
		w.whAwaitStatus(t, ep, w.whDeliveryOf(t, ep, evt), webhook.StatusSucceeded)
	}
	assert.EqualValues(t, 2, rc.count.Load(), "the repeat sent nothing")
	assert.Len(t, w.whDeliveries(t, ep, ""), 2)

	// An over-long key is refused rather than silently truncated, and
	// listed with the body's invalid fields, every one at once.
	long := map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}
	for _, tt := range []struct {
		name string
		body map[string]any
		want []string
	}{
		{"valid body", map[string]any{"type": webhook.EventOrderStatus, "data": whOrder("o1", "pending")}, []string{"Idempotency-Key"}},
		{"unknown type", map[string]any{"type": "order.eaten", "data": whOrder("o1", "pending")}, []string{"type", "Idempotency-Key"}},
	} {
		r := w.do(t, whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: whKeyA, body: tt.body, header: long})
		got := whRequireError(t, r, http.StatusUnprocessableEntity, "validation_failed")
		assert.Equal(t, tt.want, got, "fields of the 422 with %s", tt.name)
	}
}

// --- delivery log ---------------------------------------------------------

// whEventType is the type in a delivered envelope.
func whEventType(t *testing.T, body []byte) string {
	t.Helper()
	var env struct {
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(body, &env), "body %s", body)
	return env.Type
}

// whPages follows next_cursor through every page of a delivery log query.
func (w *whApp) whPages(t *testing.T, ep, query string) (all []map[string]any, pages int) {
	t.Helper()
	cursor := ""
	for {
		q := query
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?" + q, key: whKeyA})
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
		all = append(all, r.list()...)
		pages++
		require.Less(t, pages, 50, "pagination does not end")
		next, ok := r.body["next_cursor"].(string)
		require.True(t, ok, "next_cursor is a string: %s", r.raw)
		if next == "" {
			return all, pages
		}
		cursor = next
	}
}

func whField(list []map[string]any, k string) []string {
	var out []string
	for _, m := range list {
		s, _ := m[k].(string)
		out = append(out, s)
	}
	return out
}

func TestDeliveryLogFiltersAndPagination(t *testing.T) {
	// The receiver accepts order events and refuses test events, so the log
	// holds succeeded order deliveries and failed test deliveries.
	w := whStart(t, whConf{Timeout: "300ms", Retry: []string{"10ms"}, Grace: "24h", Insecure: true})
	rc := whNewReceiver(t, false, func(h whHit, w http.ResponseWriter, r *http.Request) {
		if bytes.Contains(h.body, []byte(`"type":"webhook.test"`)) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ep, _ := w.whEndpoint(t, rc.URL)

	var events, deliveries []string // in publish order
	testEvent := func() {
		r := w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/test", key: whKeyA})
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
		events = append(events, r.data()["id"].(string))
		deliveries = append(deliveries, r.data()["delivery_id"].(string))
	}
	orderEvent := func(i int) {
		evt := w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("o", i), "completed"), "")
		events = append(events, evt)
		deliveries = append(deliveries, w.whDeliveryOf(t, ep, evt))
	}
	for i := range 4 {
		orderEvent(i)
	}
	testEvent()
	for i := 4; i < 7; i++ {
		orderEvent(i)
	}
	testEvent()
	for i, d := range deliveries {
		want := webhook.StatusSucceeded
		if i == 4 || i == 8 {
			want = webhook.StatusFailed
		}
		w.whAwaitStatus(t, ep, d, want)
	}
	reversed := func(s []string) []string { s = slices.Clone(s); slices.Reverse(s); return s }

	t.Run("every page, newest first", func(t *testing.T) {
		all, pages := w.whPages(t, ep, "limit=4")
		assert.Equal(t, 3, pages)
		assert.Equal(t, reversed(deliveries), whField(all, "id"), "each delivery once, newest first")
		assert.Equal(t, reversed(events), whField(all, "event_id"))
	})
	t.Run("page size equal to the total has no next page", func(t *testing.T) {
		all, pages := w.whPages(t, ep, "limit=9")
		assert.Equal(t, 1, pages)
		assert.Len(t, all, 9)
	})
	t.Run("default limit", func(t *testing.T) {
		all, pages := w.whPages(t, ep, "")
		assert.Equal(t, 1, pages)
		assert.Len(t, all, 9)
	})
	tests := []string{deliveries[8], deliveries[4]}
	orders := reversed(slices.Concat(deliveries[:4], deliveries[5:8]))
	filters := []struct {
		query string
		want  []string
		pages int
	}{
		{"event_type=webhook.test", tests, 1},
		{"status=failed", tests, 1},
		{"event_type=webhook.test&status=failed&limit=1", tests, 2},
		{"event_type=webhook.test&status=succeeded", nil, 1},
		{"status=succeeded&limit=3", orders, 3},
		{"event_type=order.status.updated&limit=2", orders, 4},
		{"status=pending", nil, 1},
	}
	for _, tc := range filters {
		t.Run(tc.query, func(t *testing.T) {
			all, pages := w.whPages(t, ep, tc.query)
			assert.Equal(t, tc.want, whField(all, "id"))
			assert.Equal(t, tc.pages, pages)
		})
	}

	// A summary carries what a log view needs.
	all, _ := w.whPages(t, ep, "limit=100")
	failed := all[0]
	assert.Equal(t, webhook.EventTest, failed["event_type"])
	assert.Equal(t, webhook.StatusFailed, failed["status"])
	assert.Equal(t, float64(2), failed["attempt_count"])
	assert.Equal(t, float64(500), failed["last_response_status"])
	assert.Equal(t, ep, failed["endpoint_id"])
	assert.Equal(t, float64(1), all[1]["attempt_count"])
	assert.Equal(t, float64(200), all[1]["last_response_status"])
}

func TestRetryDelivery(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, rc.URL)
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	first := w.whDeliveryOf(t, ep, evt)
	w.whAwaitStatus(t, ep, first, webhook.StatusSucceeded)
	h := rc.next(t, whWait)

	r := w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + first + "/retry", key: whKeyA})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	again, _ := r.data()["id"].(string)
	assert.NotEqual(t, first, again, "a retry is a new delivery")
	assert.Equal(t, evt, r.data()["event_id"])

	h2 := rc.next(t, whWait)
	assert.Equal(t, evt, h2.header.Get("Webhook-Id"), "the same event is sent again")
	assert.Equal(t, h.body, h2.body, "with the same body")
	d := w.whAwaitStatus(t, ep, again, webhook.StatusSucceeded)
	assert.Len(t, whAttempts(t, d), 1)
	d = w.whAwaitStatus(t, ep, first, webhook.StatusSucceeded)
	assert.Len(t, whAttempts(t, d), 1, "the original delivery is untouched")
	assert.Equal(t, []string{again, first}, whField(w.whDeliveries(t, ep, ""), "id"))
}

func TestTestEndpoint(t *testing.T) {
	w := whStart(t, whFast())
	rc1 := whNewReceiver(t, false, nil)
	rc2 := whNewReceiver(t, false, nil)
	both := []string{webhook.EventOrderStatus, webhook.EventTest}
	ep1 := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": rc1.URL, "events": both})["id"].(string)
	ep2 := w.whCreate(t, whStoreA, whKeyA, map[string]any{"url": rc2.URL, "events": both})["id"].(string)

	r := w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep1) + "/test", key: whKeyA})
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.raw)
	evt, _ := r.data()["id"].(string)
	require.True(t, strings.HasPrefix(evt, "evt_"), "event id %q", evt)
	h := rc1.next(t, whWait)
	assert.Equal(t, webhook.EventTest, whEventType(t, h.body))
	assert.Equal(t, evt, h.header.Get("Webhook-Id"))
	w.whAwaitStatus(t, ep1, r.data()["delivery_id"].(string), webhook.StatusSucceeded)
	assert.Empty(t, w.whDeliveries(t, ep2, ""), "the test event goes to that endpoint only")

	// An ordinary event reaches both; rc2's only request is that one.
	ord := w.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")
	assert.Equal(t, ord, rc1.next(t, whWait).header.Get("Webhook-Id"))
	h2 := rc2.next(t, whWait)
	assert.Equal(t, ord, h2.header.Get("Webhook-Id"))
	assert.EqualValues(t, 1, rc2.count.Load())
}

func TestDeliveryLogBadQuery(t *testing.T) {
	w := whStart(t, whFast())
	ep, _ := w.whEndpoint(t, "https://hooks.example.com/")
	cases := []struct{ query, field string }{
		{"limit=0", "limit"},
		{"limit=101", "limit"},
		{"limit=-1", "limit"},
		{"limit=ten", "limit"},
		{"cursor=%21%21%21", "cursor"},
		{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte{1, 2, 3}), "cursor"},
		{"cursor=" + base64.RawURLEncoding.EncodeToString([]byte{0, 0, 0, 0, 0, 0, 0, 9}), "cursor"}, // a sequence number alone
		{"status=done", "status"},
		{"event_type=order.created", "event_type"},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?" + tc.query, key: whKeyA})
			assert.Equal(t, []string{tc.field}, whRequireError(t, r, http.StatusUnprocessableEntity, "validation_failed"))
		})
	}
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?limit=0&status=done", key: whKeyA})
	assert.ElementsMatch(t, []string{"limit", "status"}, whRequireError(t, r, http.StatusUnprocessableEntity, "validation_failed"),
		"every invalid parameter is listed")
	for _, q := range []string{"limit=1", "limit=100", "status=pending", "event_type=webhook.test"} {
		r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?" + q, key: whKeyA})
		assert.Equal(t, http.StatusOK, r.status, "%s: %s", q, r.raw)
		assert.Equal(t, "", r.body["next_cursor"])
	}
	whRequireError(t, w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/dlv_unknown", key: whKeyA}), 404, "not_found")
	whRequireError(t, w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/deliveries/dlv_unknown/retry", key: whKeyA}), 404, "not_found")

	// A cursor is its endpoint's: another endpoint's is refused.
	other, _ := w.whEndpoint(t, "https://hooks.example.com/other")
	for i := range 2 {
		w.whPublish(t, whStoreA, whKeyA, whOrder(fmt.Sprint("o", i), "pending"), "")
	}
	cursorOf := func(ep string) string {
		r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?limit=1", key: whKeyA})
		require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		require.NotEmpty(t, r.body["next_cursor"], "a log of two, one to a page")
		return r.body["next_cursor"].(string)
	}
	own, others := cursorOf(ep), cursorOf(other)
	r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?cursor=" + own, key: whKeyA})
	assert.Equal(t, http.StatusOK, r.status, "its own cursor: %s", r.raw)
	r = w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?cursor=" + others, key: whKeyA})
	assert.Equal(t, []string{"cursor"}, whRequireError(t, r, http.StatusUnprocessableEntity, "validation_failed"), "another endpoint's cursor")
}

// TestSlowClientDoesNotHoldWebhooks sends a PATCH whose body never
// finishes: its handler reads the body before taking the hooks lock, so the
// rest of the webhook API keeps answering (API.md §5.1: one slow party
// never delays another). Once the body is complete the PATCH applies.
func TestSlowClientDoesNotHoldWebhooks(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	ep, _ := w.whEndpoint(t, rc.URL)
	conn, err := net.Dial("tcp", w.srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	body := `{"description":"slow"}`
	_, err = fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		whEndpointPath(whStoreA, ep), whKeyA, len(body), body[:1])
	require.NoError(t, err)

	client := &http.Client{Timeout: 3 * time.Second}
	for i := range 50 { // the PATCH handler is waiting on its body well before the last of these
		req, _ := http.NewRequest(http.MethodGet, w.srv.URL+whHooksPath(whStoreA), nil)
		req.Header.Set("X-API-Key", whKeyA)
		resp, err := client.Do(req)
		require.NoError(t, err, "GET %d while a PATCH body trickles in", i)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}

	_, err = io.WriteString(conn, body[1:])
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	r := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep), key: whKeyA})
	assert.Equal(t, "slow", r.data()["description"])
}

// TestWebhookChangesWhileStateCannotBeWritten: while the webhook state's
// last save failed, or the store's last write, every change to the webhook
// state answers 503 unavailable with Retry-After (API.md §3, "unable to
// persist"), as a registration does, rather than acknowledging what a
// restart would lose; reads go on. Once a write works, changes do too.
func TestWebhookChangesWhileStateCannotBeWritten(t *testing.T) {
	w := whStart(t, whFast())
	ep, _ := w.whEndpoint(t, "https://hooks.example.com/")
	changes := []whReq{
		{method: "POST", path: whHooksPath(whStoreA), body: map[string]any{"url": "https://hooks.example.com/2", "events": []string{webhook.EventOrderStatus}}},
		{method: "PATCH", path: whEndpointPath(whStoreA, ep), body: map[string]any{"description": "d"}},
		{method: "POST", path: whEndpointPath(whStoreA, ep) + "/rotate-secret"},
		{method: "POST", path: whEndpointPath(whStoreA, ep) + "/test"},
		{method: "POST", path: whEndpointPath(whStoreA, ep) + "/deliveries/dlv_unknown/retry"},
		{method: "POST", path: whEndpointPath(whStoreA, ep) + "/recover", body: map[string]any{"since": "2025-01-31T09:00:00Z"}},
		{method: "POST", path: "/stores/" + whStoreA + "/events", body: map[string]any{"type": webhook.EventOrderStatus, "data": whOrder("o1", "pending")}},
		{method: "DELETE", path: whEndpointPath(whStoreA, ep)},
	}
	reads := []string{whHooksPath(whStoreA), whEndpointPath(whStoreA, ep), whEndpointPath(whStoreA, ep) + "/deliveries"}
	refused := func(t *testing.T) {
		t.Helper()
		for _, q := range changes {
			q.key = whKeyA
			r := w.do(t, q)
			whRequireError(t, r, http.StatusServiceUnavailable, "unavailable")
			assert.NotEmpty(t, r.header.Get("Retry-After"), "%s %s: Retry-After", q.method, q.path)
		}
		for _, p := range reads {
			assert.Equal(t, http.StatusOK, w.do(t, whReq{method: "GET", path: p, key: whKeyA}).status, "GET %s", p)
		}
	}

	t.Run("webhook state", func(t *testing.T) {
		hk := w.app.srv.hooks
		hk.St = failingPuts{hk.St}
		for _, i := range []int{0, 1, 2, 3, 6} { // those that write (a retry of no delivery, a recover of none, write nothing); the DELETE kept for the next case
			q := changes[i]
			q.key = whKeyA
			r := w.do(t, q)
			whRequireError(t, r, http.StatusServiceUnavailable, "unavailable")
		}
		hk.St = w.app.store
		w.whEndpoint(t, "https://hooks.example.com/3")
	})
	t.Run("store", func(t *testing.T) {
		w.app.srv.storeFailing = func() error { return errors.New("disk full") }
		refused(t)
		w.app.srv.storeFailing = w.app.store.Failing
		w.whEndpoint(t, "https://hooks.example.com/4")
	})
}

// TestWebhookBudgets: a store's pending deliveries may hold up to its
// budget (each its event's bytes and an overhead), and it may make up to
// its budget of Idempotency-Keys in a day and the day before; past either, what would add more
// answers 503 unavailable with Retry-After (API.md §3: over its memory
// budget), and nothing is made. Deliveries that end, or an endpoint
// deleted, give the room back; a repeated key is still answered.
func TestWebhookBudgets(t *testing.T) {
	conf := whFast()
	conf.Retry = []string{"1h"} // a failed first attempt stays pending
	w := whStart(t, conf)
	hk := w.app.srv.hooks
	held := func() int64 { return whPendingHeld(t, w, whStoreA) }
	overBudget := func(t *testing.T, r whResp) {
		t.Helper()
		whRequireError(t, r, http.StatusServiceUnavailable, "unavailable")
		assert.NotEmpty(t, r.header.Get("Retry-After"), "Retry-After")
	}
	publish := func(key string) whResp {
		q := whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: whKeyA,
			body: map[string]any{"type": webhook.EventOrderStatus, "data": whOrder("o1", "pending")}}
		if key != "" {
			q.header = map[string]string{"Idempotency-Key": key}
		}
		return w.do(t, q)
	}

	t.Run("pending deliveries", func(t *testing.T) {
		ep, _ := w.whEndpoint(t, "http://127.0.0.1:1/") // refused: never delivered
		// A pending delivery holds its event: each here has one attempt,
		// refused, and then waits an hour.
		attempted := func(n int) {
			t.Helper()
			require.Eventually(t, func() bool {
				ds := w.whDeliveries(t, ep, "")
				return len(ds) == n && !slices.ContainsFunc(ds, func(d map[string]any) bool { return d["attempt_count"] != float64(1) })
			}, whWait, time.Millisecond, "%d deliveries, each attempted once", n)
		}
		require.Equal(t, http.StatusAccepted, publish("").status)
		attempted(1)
		one := held()
		require.Greater(t, one, webhook.NewCost(len(`{"id":"o1","status":"pending"}`)), "a delivery, its event in its envelope")
		hk.Budget.Pending = 3 * one
		require.Equal(t, http.StatusAccepted, publish("").status)
		require.Equal(t, http.StatusAccepted, publish("").status)
		attempted(3)
		overBudget(t, publish(""))
		dlv := w.whDeliveries(t, ep, "")[0]["id"].(string)
		overBudget(t, w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/test", key: whKeyA}))
		overBudget(t, w.do(t, whReq{method: "POST", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + dlv + "/retry", key: whKeyA}))
		assert.Len(t, w.whDeliveries(t, ep, ""), 3, "nothing was made past the budget")
		assert.Equal(t, 3*one, held())

		w.do(t, whReq{method: "DELETE", path: whEndpointPath(whStoreA, ep), key: whKeyA})
		assert.Zero(t, held(), "the deleted endpoint's pending deliveries")
		hk.Budget.Pending = webhook.PendingBudget
	})
	t.Run("idempotency keys", func(t *testing.T) {
		hk.Budget.Idem = 2
		first := publish("k1")
		require.Equal(t, http.StatusAccepted, first.status)
		require.Equal(t, http.StatusAccepted, publish("k2").status)
		overBudget(t, publish("k3"))
		again := publish("k1")
		require.Equal(t, http.StatusAccepted, again.status, "a key remembered is answered: %s", again.raw)
		assert.Equal(t, first.data()["id"], again.data()["id"])
		assert.Equal(t, http.StatusAccepted, publish("").status, "a publish without a key")
	})
}

// failingPuts is a store that cannot write: every change fails as a full
// disk fails it.
type failingPuts struct{ store.Store }

var errDiskFull = fmt.Errorf("%w: disk full", store.ErrUnavailable)

func (failingPuts) Put(context.Context, string, []byte, time.Time) error    { return errDiskFull }
func (failingPuts) Insert(context.Context, string, []byte, time.Time) error { return errDiskFull }
func (failingPuts) CompareAndSwap(context.Context, string, []byte, []byte, time.Time) error {
	return errDiskFull
}
func (failingPuts) Delete(context.Context, string) error { return errDiskFull }
func (failingPuts) Add(context.Context, string, int64, time.Time) (int64, error) {
	return 0, errDiskFull
}
func (failingPuts) ZAdd(context.Context, string, string, int64) error { return errDiskFull }
func (failingPuts) ZRem(context.Context, string, string) error        { return errDiskFull }
func (failingPuts) ZClaim(context.Context, string, int64, int64, int) ([]store.Scored, error) {
	return nil, errDiskFull
}
func (failingPuts) Apply(context.Context, []store.Write) error { return errDiskFull }

// TestChecksBeforeTheRefusal: while changes cannot be written, a request
// that the store, key or endpoint checks refuse gets their answer, not
// the 503: an unknown store stays 404, a wrong key 401, an unknown
// endpoint 404.
func TestChecksBeforeTheRefusal(t *testing.T) {
	w := whStart(t, whFast())
	w.app.srv.storeFailing = func() error { return errors.New("disk full") }
	body := map[string]any{"type": webhook.EventOrderStatus, "data": whOrder("o1", "pending")}
	for _, tt := range []struct {
		name string
		q    whReq
		want int
		code string
	}{
		{"unknown store", whReq{method: "POST", path: "/stores/6ba7b810-9dad-11d1-80b4-00c04fd430c8/events", key: whKeyA, body: body}, http.StatusNotFound, "store_not_found"},
		{"wrong key", whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: "ak_wrong", body: body}, http.StatusUnauthorized, "unauthorized"},
		{"unknown endpoint", whReq{method: "PATCH", path: whEndpointPath(whStoreA, "we_unknown"), key: whKeyA, body: map[string]any{"description": "d"}}, http.StatusNotFound, "not_found"},
		{"a change", whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: whKeyA, body: body}, http.StatusServiceUnavailable, "unavailable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			whRequireError(t, w.do(t, tt.q), tt.want, tt.code)
		})
	}
}

// whPendingHeld is what the store's pending deliveries hold of its
// budget, as the engine counts it in the store ("hooks:pending:" and the
// store's id).
func whPendingHeld(t *testing.T, w *whApp, storeID string) int64 {
	t.Helper()
	return whCounter(t, w, "hooks:pending:"+storeID)
}

// whLogHeld is what the endpoint ep's finished deliveries hold of its
// log's budget, as the engine counts it in the store ("hooks:logbytes:"
// and the endpoint's id).
func whLogHeld(t *testing.T, w *whApp, ep string) int64 {
	t.Helper()
	return whCounter(t, w, "hooks:logbytes:"+ep)
}

// whCounter is the engine's counter key in the store, 0 when it has none.
func whCounter(t *testing.T, w *whApp, key string) int64 {
	t.Helper()
	b, err := w.app.store.Get(t.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	require.NoError(t, err)
	n, err := strconv.ParseInt(string(b), 10, 64)
	require.NoError(t, err)
	return n
}
