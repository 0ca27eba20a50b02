package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The merchant dashboard: server-rendered pages over the same handlers as
// the JSON API, for a store's staff signed in with one of its API keys.
// Pages and static files are embedded; nothing is loaded from elsewhere.

//go:embed web
var webFiles embed.FS

var dashPages = template.Must(template.New("").Funcs(template.FuncMap{
	"ago":     ago,
	"until":   until,
	"clock":   clock,
	"iso":     func(t int64) string { return time.Unix(t, 0).UTC().Format(time.RFC3339) },
	"percent": func(f float64) int { return int(f*100 + 0.5) },
	"inc":     func(i int) int { return i + 1 },
	"has":     func(list []string, v string) bool { return slices.Contains(list, v) },
}).ParseFS(webFiles, "web/*.html"))

const (
	dashCookie    = "deeplink_dashboard"
	dashKeyPrefix = "dash:" // + hex SHA-256 of the session's cookie value
)

// dashSession is a signed-in dashboard session: bound to one store, with
// the token every change must carry, and the store's settings as they
// stood when the request began.
type dashSession struct {
	Store    *StoreConfig
	Settings storeSettings
	CSRF     string
	key      string // where it is kept in the store
	keyID    string // of the API key it was signed in with
}

// page is the session's store as pages show it.
func (sess *dashSession) page() *storePage { return sess.Settings.page(sess.Store) }

// dashRoutes adds the dashboard of the merchant area.
func (s *server) dashRoutes(mux *http.ServeMux) {
	// The two static files, whole: a few KB each, never asked for in
	// ranges (and a 416 would not be an error body of the service's).
	for _, name := range []string{"dashboard.css", "dashboard.js"} {
		body, err := webFiles.ReadFile("web/static/" + name)
		if err != nil {
			panic(err) // embedded: present in every build
		}
		ctype := mime.TypeByExtension(path.Ext(name))
		mux.HandleFunc("GET /dashboard/static/"+name, s.dashHeaders(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Write(body)
		}))
	}
	mux.HandleFunc("GET /dashboard", s.dashHeaders(s.dashHome))
	mux.HandleFunc("/dashboard/", s.dashHeaders(s.dashNotFound))
	mux.HandleFunc("GET /dashboard/sign-in", s.dashHeaders(s.dashSignInPage))
	mux.HandleFunc("POST /dashboard/sign-in", s.dashHeaders(s.dashChange(s.dashSignIn)))
	mux.HandleFunc("POST /dashboard/sign-out", s.dashHeaders(s.dashChange(s.dashSignOut)))
	s.dashSettingsRoutes(mux)
	s.dashWebhookRoutes(mux)
}

// dashHeaders sets what every dashboard response carries: no framing, no
// inline script or style, nothing from another origin, no caching of a
// page that may show a secret.
func (s *server) dashHeaders(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/dashboard/static/") {
			hd.Set("Cache-Control", "no-store")
		}
		h(w, r)
	}
}

var crossOrigin = http.NewCrossOriginProtection()

// dashChange refuses, with 403 and before anything is changed, a change
// sent from another site: by the browser's Sec-Fetch-Site or Origin
// (http.CrossOriginProtection), and, once signed in, without the page's
// token (signedIn checks it).
func (s *server) dashChange(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := crossOrigin.Check(r); err != nil {
			s.dashRefuse(w, nil, "This change came from another site and was refused.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		h(w, r)
	}
}

// dashRefuse answers 403 with msg; sess, when there is one, keeps the
// page's navigation.
func (s *server) dashRefuse(w http.ResponseWriter, sess *dashSession, msg string) {
	s.render(w, http.StatusForbidden, "error.html", map[string]any{"Title": "Refused", "Message": msg, "Session": sess, "Store": storeOf(sess)})
}

// dashUnavailable answers 503 while the state cannot be read or written.
func (s *server) dashUnavailable(w http.ResponseWriter, sess *dashSession) {
	w.Header().Set("Retry-After", "5")
	s.render(w, http.StatusServiceUnavailable, "error.html", map[string]any{"Title": "Unavailable", "Message": "The service cannot read or write its state just now; try again in a moment.", "Session": sess, "Store": storeOf(sess)})
}

func storeOf(sess *dashSession) *storePage {
	if sess == nil {
		return nil
	}
	return sess.page()
}

// dashNotFound answers a dashboard path that is not a page.
func (s *server) dashNotFound(w http.ResponseWriter, r *http.Request) {
	sess, _ := s.dashSessionOf(r)
	s.render(w, http.StatusNotFound, "error.html", map[string]any{"Title": "Not found", "Message": "There is no such page in the dashboard.", "Session": sess, "Store": storeOf(sess)})
}

// signedIn runs h with the request's session, or sends the browser to
// sign in. A POST must carry the session's token in its csrf field.
func (s *server) signedIn(h func(http.ResponseWriter, *http.Request, *dashSession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.dashSessionOf(r)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.dashUnavailable(w, nil)
			return
		}
		if sess == nil {
			if r.Method != http.MethodGet {
				s.dashRefuse(w, nil, "Your session has ended. Sign in again, then repeat the change.")
				return
			}
			http.Redirect(w, r, "/dashboard/sign-in", http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && !sess.tokenOf(r) {
			s.dashRefuse(w, sess, "This change did not come from a page of this dashboard and was refused.")
			return
		}
		// The API's calls the page makes log the session's key as theirs.
		h(w, r.WithContext(context.WithValue(r.Context(), keyIDKey{}, sess.keyID)), sess)
	}
}

// dashSessionOf returns the session the request's cookie names, or nil.
func (s *server) dashSessionOf(r *http.Request) (*dashSession, error) {
	c, err := r.Cookie(dashCookie)
	if err != nil || c.Value == "" || len(c.Value) > 64 {
		return nil, nil
	}
	v, err := s.store.Get(r.Context(), dashKey(c.Value))
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	parts := strings.Split(string(v), "\x00")
	if len(parts) != 3 {
		return nil, nil
	}
	st := s.cfg.Store(parts[0])
	if st == nil {
		return nil, nil // the store is no longer configured
	}
	set, err := s.settingsOf(r.Context(), st)
	if err != nil {
		return nil, err
	}
	if !keyLive(st, &set, parts[2]) {
		return nil, nil // the key it was signed in with is gone
	}
	var sum [sha256.Size]byte
	hex.Decode(sum[:], []byte(parts[2])) // keyLive found it among the keys' hashes
	return &dashSession{Store: st, Settings: set, CSRF: parts[1], key: dashKey(c.Value), keyID: keyID(sum)}, nil
}

// tokenOf reports whether r carries the session's page token.
func (sess *dashSession) tokenOf(r *http.Request) bool {
	return subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.CSRF)) == 1
}

// dashKey is where the session of the cookie value v is kept: a hash, so
// that the state on disk holds no usable session.
func dashKey(v string) string {
	sum := sha256.Sum256([]byte(v))
	return dashKeyPrefix + hex.EncodeToString(sum[:])
}

func (s *server) dashHome(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/dashboard/webhooks", http.StatusSeeOther)
}

func (s *server) dashSignInPage(w http.ResponseWriter, r *http.Request) {
	if sess, _ := s.dashSessionOf(r); sess != nil {
		http.Redirect(w, r, "/dashboard/webhooks", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "signin.html", map[string]any{"Title": "Sign in", "Notice": signInNotice(r.URL.Query().Get("ended"))})
}

// signInNotice is why the sign-in page was sent to, when a session ended:
// fixed texts only, so a link cannot put words on the page.
func signInNotice(ended string) string {
	return map[string]string{
		"revoked": "You revoked the API key this session was signed in with, so the session has ended. Sign in with another of the store's keys.",
	}[ended]
}

// dashSignIn checks a store id and API key; a wrong one counts toward the
// API's failed-key limit of the client's address for that store
// (keyGuard), ids that name no store all toward one.
func (s *server) dashSignIn(w http.ResponseWriter, r *http.Request) {
	id, key := strings.TrimSpace(r.PostFormValue("store_id")), r.PostFormValue("api_key")
	page := map[string]any{"Title": "Sign in", "StoreID": id}
	st := s.cfg.Store(id)
	storeID := ""
	if st != nil {
		storeID = st.ID
	}
	client := guardKey(clientAddr(r, s.cfg.Proxies()), storeID)
	if blocked, wait := s.keys.blocked(client, s.now); blocked {
		secs := max(1, int(wait.Seconds()+0.999))
		page["Error"] = "Too many wrong keys for this store from this address. Try again in " + roughly(time.Duration(secs)*time.Second) + "."
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.render(w, http.StatusTooManyRequests, "signin.html", page)
		return
	}
	var k *keySlot
	if st != nil {
		var err error
		if k, err = s.apiKeyOf(r.Context(), st, key); err != nil {
			s.dashUnavailable(w, nil)
			return
		}
	}
	if k == nil {
		s.keys.failed(r.Context(), client, s.now())
		page["Error"] = "That store ID and API key do not match a store of this service."
		s.render(w, http.StatusUnauthorized, "signin.html", page)
		return
	}
	if s.overStoreShare(r.Context(), st) {
		// Sessions count in the store's share of live entries: signing
		// in again and again must not crowd out other stores' sign-ins.
		w.Header().Set("Retry-After", "60")
		page["Error"] = "This store holds as many sign-ins and sessions as it may right now. Try again in a few minutes, or sign out elsewhere first."
		s.render(w, http.StatusServiceUnavailable, "signin.html", page)
		return
	}
	token, csrf := randomToken(), randomToken()
	exp := s.now().Add(s.cfg.Dashboard.SessionTTL.D())
	sum := sha256.Sum256([]byte(key))
	if err := s.store.Put(r.Context(), dashKey(token), []byte(st.ID+"\x00"+csrf+"\x00"+hex.EncodeToString(sum[:])), exp); err != nil {
		s.dashUnavailable(w, nil)
		return
	}
	s.countDashSession(r.Context(), st, exp)
	s.keyUsed(r.Context(), st, k)
	http.SetCookie(w, &http.Cookie{
		Name: dashCookie, Value: token, Path: "/dashboard", Expires: exp,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r),
	})
	http.Redirect(w, r, "/dashboard/webhooks", http.StatusSeeOther)
}

// dashSignOut ends the session and forgets its cookie; with a session
// already ended it only forgets the cookie.
func (s *server) dashSignOut(w http.ResponseWriter, r *http.Request) {
	sess, err := s.dashSessionOf(r)
	switch {
	case err != nil:
		s.dashUnavailable(w, nil)
		return
	case sess != nil && !sess.tokenOf(r):
		s.dashRefuse(w, sess, "This sign-out did not come from a page of this dashboard and was refused.")
		return
	case sess != nil:
		c, _ := r.Cookie(dashCookie)
		if err := s.store.Delete(r.Context(), dashKey(c.Value)); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.dashUnavailable(w, sess)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: dashCookie, Path: "/dashboard", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	http.Redirect(w, r, "/dashboard/sign-in", http.StatusSeeOther)
}

// secureCookie reports whether the session's cookie is marked Secure:
// always, but for a browser on this machine over plain HTTP
// (plainLoopback), to which it would not come back. A request from one of
// the trusted proxies is not one, whatever its Host: the proxy serves the
// public URL (and says X-Forwarded-Proto: http when it does so without
// TLS).
func (s *server) secureCookie(r *http.Request) bool {
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && isTrusted(peer.Addr().Unmap(), s.cfg.Proxies()) {
		return !strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "http")
	}
	return !plainLoopback(r)
}

// plainLoopback reports whether r came over plain HTTP to a loopback
// address, where a Secure cookie would not be sent back. A proxy that
// terminated TLS and says so (X-Forwarded-Proto) makes it not plain.
func plainLoopback(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// render executes the page name with data, buffered so that a template
// error answers 500 instead of half a page.
func (s *server) render(w http.ResponseWriter, status int, name string, data map[string]any) {
	var b bytes.Buffer
	if err := dashPages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("dashboard: rendering a page failed", "page", name, "err", err)
		http.Error(w, "the page could not be made", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "2") // the state's store fails: a moment, as the API's 503s
	}
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// apiCall is a request to the JSON API that a dashboard page makes in
// process, for the store it is signed in to: the API's own validation,
// limits and persistence, without its key check.
type apiCall struct {
	method string
	path   map[string]string // path values, such as endpoint_id
	query  url.Values
	body   any // sent as JSON; nil sends none
}

// apiAnswer is what the API answered an apiCall.
type apiAnswer struct {
	status int
	Data   json.RawMessage `json:"data"`
	Next   string          `json:"next_cursor"`
	Error  *apiError       `json:"error"`
}

// call runs h, an API handler of the store st, for c.
func (s *server) call(ctx context.Context, st *StoreConfig, c apiCall, h func(http.ResponseWriter, *http.Request, *StoreConfig)) apiAnswer {
	var body []byte
	if c.body != nil {
		body, _ = json.Marshal(c.body)
	}
	r, _ := http.NewRequestWithContext(ctx, c.method, "/", bytes.NewReader(body))
	if c.body == nil {
		r.Body = http.NoBody
	}
	r.Header.Set("Content-Type", "application/json")
	r.URL.RawQuery = c.query.Encode()
	for k, v := range c.path {
		r.SetPathValue(k, v)
	}
	rec := &recorder{header: http.Header{}}
	h(rec, r, st)
	a := apiAnswer{status: rec.code()}
	json.Unmarshal(rec.body.Bytes(), &a)
	return a
}

// ago is how long before now t (unix seconds) was, in words.
func ago(t int64) string {
	if t == 0 {
		return "never"
	}
	d := time.Since(time.Unix(t, 0))
	if d < 0 {
		d = 0
	}
	return roughly(d) + " ago"
}

// until is how long from now until t (unix seconds), in words.
func until(t int64) string {
	d := time.Until(time.Unix(t, 0))
	if d <= time.Second {
		return "now"
	}
	return "in " + roughly(d)
}

// roughly is d in one unit, rounded: "42 s", "5 min", "3 h", "2 days".
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute).Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", int(d.Round(time.Hour).Hours()))
	default:
		return fmt.Sprintf("%d days", int(d.Round(24*time.Hour).Hours()/24))
	}
}

// clock is the time t (unix seconds) as UTC in the RFC 3339 form.
func clock(t int64) string { return time.Unix(t, 0).UTC().Format("2006-01-02 15:04:05 UTC") }
