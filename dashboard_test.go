package main

import (
	"bytes"
	"deeplink/internal/webhook"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the merchant dashboard through the real mux, as a browser
// without script would use it: forms posted, redirects followed, cookies
// kept. The browser test (browser_test.go) clicks the same
// pages in Chromium.

// dashClient is a signed-out browser of the dashboard of w.
type dashClient struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string // the token of the last page that carried one
}

func newDashClient(t *testing.T, base string) *dashClient {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &dashClient{t: t, base: base, c: &http.Client{Jar: jar}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// page is a dashboard answer: its status and body.
type page struct {
	status int
	header http.Header
	body   string
}

func (d *dashClient) keep(resp *http.Response, err error) page {
	d.t.Helper()
	require.NoError(d.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	if m := csrfField.FindStringSubmatch(string(b)); m != nil {
		d.csrf = m[1]
	}
	return page{resp.StatusCode, resp.Header, string(b)}
}

func (d *dashClient) get(path string) page {
	d.t.Helper()
	return d.keep(d.c.Get(d.base + path))
}

// post sends a form as the dashboard's pages do, with the page's token
// unless form sets csrf itself.
func (d *dashClient) post(path string, form url.Values, header ...string) page {
	d.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok && d.csrf != "" {
		form.Set("csrf", d.csrf)
	}
	req, err := http.NewRequest(http.MethodPost, d.base+path, strings.NewReader(form.Encode()))
	require.NoError(d.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return d.keep(d.c.Do(req))
}

func (d *dashClient) signIn(store, key string) page {
	d.t.Helper()
	return d.post("/dashboard/sign-in", url.Values{"store_id": {store}, "api_key": {key}})
}

var secretPattern = regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`)

// secretShown returns the signing secret a page shows, or "": read from
// its text, as the template escapes it (a "+" is "&#43;").
func secretShown(body string) string { return secretPattern.FindString(html.UnescapeString(body)) }

func TestDashboardSignIn(t *testing.T) {
	w := whStart(t, whFast())
	tests := []struct {
		name, store, key string
		status           int
		want             string
	}{
		{"wrong key", whStoreA, "ak_wrong", http.StatusUnauthorized, "do not match a store"},
		{"key of another store", whStoreA, whKeyB, http.StatusUnauthorized, "do not match a store"},
		{"unknown store", "nope", whKeyA, http.StatusUnauthorized, "do not match a store"},
		{"right key", whStoreA, whKeyA, http.StatusOK, "Add endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDashClient(t, w.srv.URL)
			p := d.signIn(tc.store, tc.key)
			assert.Equal(t, tc.status, p.status, "sign-in of %q with %q", tc.store, tc.key)
			assert.Contains(t, p.body, tc.want)
			assert.NotContains(t, p.body, tc.key, "the key is never echoed")
		})
	}

	// The cookie is Secure but for a browser on this machine over plain
	// HTTP, to which it would not come back; a trusted proxy's requests
	// come to a loopback address too (a proxy_pass to 127.0.0.1 keeps
	// that Host), but from a browser over the public URL.
	proxied := whStart(t, whConf{Timeout: "300ms", Retry: []string{"20ms"}, Grace: "24h", Insecure: true, Proxies: []string{"127.0.0.1"}})
	for _, tc := range []struct {
		name   string
		srv    *whApp
		proto  string // X-Forwarded-Proto
		secure bool
	}{
		{"a browser on this machine", w, "", false},
		{"a proxy that says https", w, "https", true},
		{"a trusted proxy", proxied, "", true},
		{"a trusted proxy that says http", proxied, "http", false},
	} {
		t.Run("cookie/"+tc.name, func(t *testing.T) {
			form := url.Values{"store_id": {whStoreA}, "api_key": {whKeyA}}
			req, _ := http.NewRequest(http.MethodPost, tc.srv.srv.URL+"/dashboard/sign-in", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			resp, err := (&http.Transport{}).RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			c := resp.Header.Get("Set-Cookie")
			for _, want := range []string{dashCookie + "=", "Path=/dashboard", "HttpOnly", "SameSite=Strict"} {
				assert.Contains(t, c, want)
			}
			assert.Equal(t, tc.secure, strings.Contains(c, "; Secure"), "Secure in %q", c)
		})
	}

	t.Run("signed out", func(t *testing.T) {
		d := newDashClient(t, w.srv.URL)
		for _, path := range []string{"/dashboard/webhooks", "/dashboard/settings"} {
			p := d.get(path)
			assert.Contains(t, p.body, `action="/dashboard/sign-in"`, "GET %s signed out", path)
		}
	})
}

func TestDashboardFailedSignInsAreLimited(t *testing.T) {
	w := whStart(t, whFast())
	stopClock(w.app) // no refill while the test makes its 101 tries, however slow
	d := newDashClient(t, w.srv.URL)
	var p page
	for range keyFailBurst + 1 {
		p = d.signIn(whStoreA, "ak_wrong")
	}
	assert.Equal(t, http.StatusTooManyRequests, p.status, "after %d wrong keys", keyFailBurst+1)
	assert.Equal(t, http.StatusTooManyRequests, d.signIn(whStoreA, whKeyA).status, "the right key of the store guessed at")
	// The API's check counts the same failures.
	r := w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: "ak_wrong"})
	assert.Equal(t, http.StatusTooManyRequests, r.status, "the API after the dashboard's failures")
	// Another store's staff at the same address can still sign in.
	assert.Equal(t, http.StatusOK, d.signIn(whStoreB, whKeyB).status, "another store from the same address")
	// Store ids that name no store share one budget: inventing them buys no fresh tries.
	for i := range keyFailBurst + 1 {
		p = d.signIn(fmt.Sprintf("no-such-store-%d", i), "ak_wrong")
	}
	assert.Equal(t, http.StatusTooManyRequests, p.status, "after %d unknown stores", keyFailBurst+1)
}

func TestDashboardHeaders(t *testing.T) {
	w := whStart(t, whFast())
	d := newDashClient(t, w.srv.URL)
	for _, path := range []string{"/dashboard/sign-in", "/dashboard/static/dashboard.css"} {
		p := d.get(path)
		require.Equal(t, http.StatusOK, p.status, path)
		csp := p.header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "frame-ancestors 'none'", path)
		assert.NotContains(t, csp, "unsafe-inline", path)
		assert.Equal(t, "DENY", p.header.Get("X-Frame-Options"), path)
	}
}

// TestDashboardStaticFiles: the stylesheet and the script are served
// whole, with their types, a range asked for or not.
func TestDashboardStaticFiles(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	for _, tt := range []struct{ name, ctype string }{
		{"dashboard.css", "text/css; charset=utf-8"},
		{"dashboard.js", "text/javascript; charset=utf-8"},
	} {
		want, err := webFiles.ReadFile("web/static/" + tt.name)
		require.NoError(t, err)
		for _, rng := range []string{"", "bytes=0-9", "bytes=999999-"} {
			got := call(t, http.MethodGet, ts.URL+"/dashboard/static/"+tt.name, nil, "Range", rng)
			if got.status != http.StatusOK || got.header.Get("Content-Type") != tt.ctype || !bytes.Equal(got.body, want) {
				t.Errorf("GET %s (Range %q) = %d %q, %d bytes; want 200 %q, the file's %d bytes", tt.name, rng, got.status, got.header.Get("Content-Type"), len(got.body), tt.ctype, len(want))
			}
		}
	}
}

// TestDashboardWebhooks walks an endpoint's life through the pages: add,
// secret shown once, test event delivered and listed, filters, attempt
// details, retry, reveal, rotate, disable, enable, delete.
func TestDashboardWebhooks(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	d := newDashClient(t, w.srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)

	p := d.post("/dashboard/webhooks/new", url.Values{"url": {"ftp://nope"}, "events": {webhook.EventOrderStatus}, "enabled": {"on"}})
	assert.Equal(t, http.StatusUnprocessableEntity, p.status, "a bad URL")
	assert.Contains(t, p.body, `aria-invalid="true"`)

	p = d.post("/dashboard/webhooks/new", url.Values{"url": {rc.URL + "/hooks"}, "description": {"orders"}, "events": {webhook.EventOrderStatus}, "enabled": {"on"}})
	require.Equal(t, http.StatusOK, p.status, p.body)
	secret := secretShown(p.body)
	require.NotEmpty(t, secret, "the secret right after saving")
	assert.Contains(t, p.body, ">Copy<")

	eps := w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA}).list()
	require.Len(t, eps, 1)
	id := eps[0]["id"].(string)
	assert.Equal(t, rc.URL+"/hooks", eps[0]["url"])
	assert.Equal(t, "orders", eps[0]["description"])

	p = d.get("/dashboard/webhooks/" + id + "/new-secret")
	assert.NotContains(t, p.body, secret, "the page after Save, opened again: the secret is shown once")
	assert.Len(t, w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA}).list(), 1, "and no second endpoint")
	p = d.get("/dashboard/webhooks")
	assert.Contains(t, p.body, rc.URL+"/hooks")
	assert.NotContains(t, p.body, secret, "the list never shows the secret")

	p = d.post("/dashboard/webhooks/"+id+"/test", nil)
	require.Equal(t, http.StatusOK, p.status)
	assert.Contains(t, p.body, "Test event sent")
	rc.next(t, whWait)
	deadline := time.Now().Add(whWait)
	for !strings.Contains(p.body, `data-status="succeeded"`) {
		require.True(t, time.Now().Before(deadline), "the test delivery never showed as succeeded:\n%s", p.body)
		time.Sleep(10 * time.Millisecond) // polling as the page's script does
		p = d.get("/dashboard/webhooks/" + id + "/deliveries?partial=rows")
	}
	p = d.get("/dashboard/webhooks/" + id + "/deliveries?partial=rows")
	assert.NotContains(t, p.body, "<html", "partial=rows is the rows alone")
	assert.Contains(t, p.body, `data-status="succeeded"`)

	for _, tc := range []struct {
		query string
		rows  int
	}{
		{"", 1}, {"?status=succeeded", 1}, {"?status=failed", 0}, {"?event_type=webhook.test", 1}, {"?event_type=order.status.updated", 0},
	} {
		p := d.get("/dashboard/webhooks/" + id + "/deliveries" + tc.query)
		assert.Equal(t, tc.rows, strings.Count(p.body, "<tr data-status="), "rows of deliveries%s", tc.query)
	}
	dl := w.whDeliveries(t, id, "")
	require.Len(t, dl, 1)
	did := dl[0]["id"].(string)
	p = d.get("/dashboard/webhooks/" + id + "/deliveries/" + did)
	assert.Contains(t, p.body, "Attempt 1")
	assert.Contains(t, p.body, "X-Webhook-Signature")
	assert.Contains(t, p.body, dl[0]["event_id"].(string))

	p = d.post("/dashboard/webhooks/"+id+"/deliveries/"+did+"/retry", nil)
	assert.Contains(t, p.body, "Delivery queued again")
	rc.next(t, whWait)

	p = d.post("/dashboard/webhooks/"+id+"/secret", nil)
	assert.Equal(t, secret, secretShown(p.body), "Reveal secret")
	p = d.post("/dashboard/webhooks/"+id+"/rotate", nil)
	rotated := secretShown(p.body)
	assert.NotEmpty(t, rotated)
	assert.NotEqual(t, secret, rotated, "Rotate secret shows a new one")

	p = d.post("/dashboard/webhooks/"+id+"/disable", nil)
	assert.Contains(t, p.body, "Endpoint disabled")
	assert.Equal(t, false, w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA}).data()["enabled"])
	p = d.post("/dashboard/webhooks/"+id+"/enable", nil)
	assert.Contains(t, p.body, "Endpoint enabled")
	assert.Equal(t, true, w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA}).data()["enabled"])

	p = d.post("/dashboard/webhooks/"+id+"/edit", url.Values{"url": {rc.URL + "/v2"}, "events": {webhook.EventOrderStatus, webhook.EventTest}, "enabled": {"on"}})
	assert.Contains(t, p.body, "Endpoint saved")
	got := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA}).data()
	assert.Equal(t, rc.URL+"/v2", got["url"])

	p = d.get("/dashboard/webhooks/" + id + "/delete")
	assert.Contains(t, p.body, "cannot be undone")
	p = d.post("/dashboard/webhooks/"+id+"/delete", nil)
	assert.Contains(t, p.body, "Endpoint deleted")
	assert.Empty(t, w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA}).list())
}

// TestDashboardRefusesCrossSite: a change without the page's token, or
// sent by a browser from another site, is refused with 403 and changes
// nothing.
func TestDashboardRefusesCrossSite(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	id, _ := w.whEndpoint(t, rc.URL)
	d := newDashClient(t, w.srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	tests := []struct {
		name   string
		form   url.Values
		header []string
	}{
		{"no token", url.Values{"csrf": {""}}, nil},
		{"wrong token", url.Values{"csrf": {"forged"}}, nil},
		{"another origin", nil, []string{"Origin", "https://evil.example"}},
		{"cross-site fetch", nil, []string{"Sec-Fetch-Site", "cross-site"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := d.post("/dashboard/webhooks/"+id+"/disable", tc.form, tc.header...)
			assert.Equal(t, http.StatusForbidden, p.status)
			assert.Equal(t, true, w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, id), key: whKeyA}).data()["enabled"], "still enabled")
		})
	}
	t.Run("sign-in from another site", func(t *testing.T) {
		p := newDashClient(t, w.srv.URL).post("/dashboard/sign-in", url.Values{"store_id": {whStoreA}, "api_key": {whKeyA}}, "Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, p.status)
	})
}

// TestDashboardSessionLifetime: a session lasts across a restart, ends at
// sign-out, and is of one store only.
func TestDashboardSessionLifetime(t *testing.T) {
	c, d, old := signedInThenStopped(t)
	restartedFor(t, d, old, whParseConfig(t, c))

	p := d.get("/dashboard/settings")
	require.Equal(t, http.StatusOK, p.status)
	assert.Contains(t, p.body, whStoreA, "signed in after the restart, to store A")
	assert.NotContains(t, p.body, whStoreB)

	p = d.post("/dashboard/sign-out", nil)
	assert.Contains(t, p.body, `action="/dashboard/sign-in"`)
	p = d.get("/dashboard/settings")
	assert.Contains(t, p.body, `action="/dashboard/sign-in"`, "signed out")
}

func TestDashboardSessionExpires(t *testing.T) {
	wc := whFast()
	wc.DataDir = t.TempDir()
	cfg := whParseConfig(t, wc)
	c := &testClock{}
	a, err := newAppAt(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false, c.now)
	require.NoError(t, err)
	clocks.Store(a, c)
	t.Cleanup(func() { a.Close() })
	srv := httptestServer(t, a)
	d := newDashClient(t, srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	advance(a, cfg.Dashboard.SessionTTL.D()-time.Minute)
	assert.Contains(t, d.get("/dashboard/settings").body, whStoreA, "within dashboard.session_ttl")
	advance(a, 2*time.Minute)
	assert.Contains(t, d.get("/dashboard/settings").body, `action="/dashboard/sign-in"`, "after dashboard.session_ttl")
}

// httptestServer serves a over plain HTTP until the test ends.
func httptestServer(t *testing.T, a *app) *httptest.Server {
	srv := httptest.NewServer(a.srv.handler())
	t.Cleanup(srv.Close)
	return srv
}

// TestDashboardRecover: the Recover form sends the failed deliveries
// since its time again, once the receiver is back.
func TestDashboardRecover(t *testing.T) {
	w := whStart(t, whFast())
	var down atomic.Bool
	down.Store(true)
	rc := whNewReceiver(t, false, func(_ whHit, rw http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			rw.WriteHeader(http.StatusInternalServerError)
		}
	})
	id, _ := w.whEndpoint(t, rc.URL)
	evt := w.whPublish(t, whStoreA, whKeyA, whOrder("o-1", "completed"), "")
	w.whAwaitStatus(t, id, w.whDeliveryOf(t, id, evt), webhook.StatusFailed)
	down.Store(false)
	for len(rc.hits) > 0 {
		<-rc.hits
	}

	d := newDashClient(t, w.srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	tests := []struct {
		name string
		form url.Values
		want string
	}{
		{"after the event", url.Values{"since_rfc3339": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}}, "nothing to send again"},
		{"before it, from the script", url.Values{"since_rfc3339": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}}, "Failed deliveries queued again"},
		{"no time", url.Values{"since": {""}}, "since"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := d.post("/dashboard/webhooks/"+id+"/recover", tc.form)
			assert.Contains(t, p.body, tc.want)
		})
	}
	h := rc.next(t, whWait)
	assert.Contains(t, string(h.body), evt, "the failed event, sent again")
}

// TestEndpointStats: an endpoint's chart of its last 24 hours (the
// counting itself is the engine's: webhook.Hooks.LastDay).
func TestEndpointStats(t *testing.T) {
	st := endpointStats{Counts: webhook.Counts{Succeeded: 3, Failed: 1, Pending: 1}}
	st.Hours[23] = webhook.Counts{Succeeded: 1, Pending: 1}
	st.Hours[22] = webhook.Counts{Failed: 1}
	st.Hours[18] = webhook.Counts{Succeeded: 1}
	st.Hours[0] = webhook.Counts{Succeeded: 1}
	if got, want := st.Rate(), 0.75; got != want {
		t.Errorf("Rate() = %v; want %v", got, want)
	}
	if got := (endpointStats{}).Rate(); got != 0 {
		t.Errorf("Rate() of none = %v; want 0", got)
	}
	if n := len(st.Bars()); n != 24+5 {
		t.Errorf("len(Bars()) = %d; want 24 slots and 5 parts", n)
	}
}

// TestDashboardSessionEndsWithItsKey: a session started with a key that the
// configuration no longer lists is over.
func TestDashboardSessionEndsWithItsKey(t *testing.T) {
	c, d, old := signedInThenStopped(t)
	cfg := whParseConfig(t, c)
	cfg.Stores[0].APIKeys = []string{"ak_test_the_new_key_of_store_a"}
	cfg, err := ParseConfig(mustJSON(t, cfg))
	require.NoError(t, err)
	restartedFor(t, d, old, cfg)
	assert.Contains(t, d.get("/dashboard/settings").body, `action="/dashboard/sign-in"`, "after the key was removed")

	p := d.post("/dashboard/sign-out", nil)
	assert.Equal(t, http.StatusOK, p.status, "signing out of an ended session")
	assert.Contains(t, p.body, `action="/dashboard/sign-in"`)
	u, _ := url.Parse(d.base)
	assert.Empty(t, d.c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/dashboard/"}), "the cookie is forgotten")
}

func TestDashboardNotFound(t *testing.T) {
	w := whStart(t, whFast())
	d := newDashClient(t, w.srv.URL)
	for _, path := range []string{"/dashboard/nope", "/dashboard/static/", "/dashboard/static/layout.html"} {
		p := d.get(path)
		assert.Equal(t, http.StatusNotFound, p.status, "GET %s", path)
		assert.Contains(t, p.header.Get("Content-Security-Policy"), "default-src 'none'", "GET %s", path)
	}
}

// signedInThenStopped starts the service, signs a browser in to store A
// and stops the service: the session is in data_dir, for a restart.
func signedInThenStopped(t *testing.T) (whConf, *dashClient, string) {
	c := whFast()
	c.DataDir = t.TempDir()
	w := whStart(t, c)
	d := newDashClient(t, w.srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	w.close()
	return c, d, w.srv.URL
}

// restartedFor serves cfg on the same data_dir and moves d's cookies from
// the service at old to it.
func restartedFor(t *testing.T, d *dashClient, old string, cfg *Config) {
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	srv := httptestServer(t, a)
	u, _ := url.Parse(old)
	u2, _ := url.Parse(srv.URL + "/dashboard/sign-in") // the cookie's path: /dashboard
	d.c.Jar.SetCookies(u2, d.c.Jar.Cookies(&url.URL{Scheme: "http", Host: u.Host, Path: "/dashboard/"}))
	d.base = srv.URL
}

// TestDashboardEndpointCap: at the store's 5 endpoints "Add endpoint" is
// still there, and the form it opens refuses a sixth with the reason at
// the top of the page, as the API refuses it.
func TestDashboardEndpointCap(t *testing.T) {
	w := whStart(t, whFast())
	d := newDashClient(t, w.srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	add := url.Values{"url": {"https://example.com/hooks"}, "events": {webhook.EventOrderStatus}, "enabled": {"on"}}
	for i := range webhook.MaxEndpointsPerStore {
		require.Equal(t, http.StatusOK, d.post("/dashboard/webhooks/new", add).status, "endpoint %d", i+1)
	}
	p := d.get("/dashboard/webhooks")
	assert.Contains(t, p.body, ">Add endpoint</a>")
	assert.Contains(t, p.body, "the most a store can have")
	p = d.post("/dashboard/webhooks/new", add)
	assert.Equal(t, http.StatusUnprocessableEntity, p.status)
	assert.Contains(t, p.body, `role="alert">This store already has 5 webhook endpoints`)
	assert.NotContains(t, p.body, "URL this store", "the cap is no fault of the URL")
}
