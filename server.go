package main

import (
	"bytes"
	"deeplink/internal/serving"
	"deeplink/internal/store"
	"deeplink/internal/webhook"
	"encoding/json"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// server holds the HTTP side of the service. Its handlers are safe for
// concurrent use.
type server struct {
	cfg          *Config
	store        store.Store
	storeFailing func() error     // why the store refuses changes now, or nil
	remote       bool             // the state is in a store of its own (Redis): while it fails, reads of state and /readyz answer 503 too
	now          func() time.Time // the clock of expiries; the store's too
	live         func() int       // live entries of the store, for /metrics
	liveCodes    *costlyGauge     // live, unredeemed auth codes, for /metrics
	cookieKey    []byte           // signs the link cookie; kept in the store
	log          *slog.Logger
	metrics      *serving.Metrics // nil in the edge module: its host counts
	hooks        *webhook.Hooks
	keys         *keyGuard // failed API key attempts by client address and store
	grants       *keyGuard // failed redemptions (invalid_grant) by client address
	tallies      tallies   // the fairness counters, as this process sees them
	views        views     // the stores' counts at hand (fairness.go)
	demo         bool      // serve the demo game app and home page

	// logRequest writes a request's log line; nil: serving.LogRequest to
	// log. The edge module hands the line to its host instead.
	logRequest func(r *http.Request, id, path, route string, status int, n int64, end time.Time, d time.Duration)

	ready    atomic.Bool // serving; /readyz answers 200
	draining atomic.Bool // shutting down; writes answer 503

	zones sync.Map // IANA zone names known to be valid

	appleBody, androidBody []byte // association files, nil when not configured

	seedWarnings []string // what seedSettings found at start, for configWarnings
}

// newServer returns the server of cfg keeping its state in st. The
// caller sets live, storeFailing and liveCodes where its store can tell.
func newServer(cfg *Config, st store.Store, cookieKey []byte, log *slog.Logger) *server {
	s := &server{cfg: cfg, store: st, cookieKey: cookieKey, log: log, metrics: &serving.Metrics{}, hooks: webhook.NewHooks(cfg),
		keys:         newKeyGuard(keyFailBurst, keyFailInterval),
		grants:       newKeyGuard(grantFailBurst, grantFailInterval),
		tallies:      tallies{st: st, m: map[tallyID]*tally{}},
		views:        newViews(cfg),
		live:         func() int { return 0 },
		storeFailing: func() error { return nil },
		now:          time.Now,
	}
	s.hooks.Log = log
	// Through s, so that a caller (or a test) that sets storeFailing
	// later has the engine refuse as the other routes do.
	s.hooks.Failing = func() error { return s.storeFailing() }
	s.hooks.ReadFailing = func() error {
		if s.remoteFailing() {
			return errStoreDown
		}
		return nil
	}
	s.keys.share(st, guardPrefix+"key:")
	s.grants.share(st, guardPrefix+"grant:")
	s.appleBody, s.androidBody = associationFiles(cfg.Apps)
	return s
}

// remoteFailing reports whether the state is in a store of its own that
// does not answer now. (The embedded store's state is in memory: reads
// go on while its disk fails, and the process is as ready as it can be.)
func (s *server) remoteFailing() bool { return s.remote && s.storeFailing() != nil }

// extraRoutes add routes that only some builds have: the edge module's
// test-only fault routes (faults_edgefault.go, build tag edgefault). Empty
// in every production build.
var extraRoutes []func(*http.ServeMux)

// routes are the service's endpoints in the Go 1.22 pattern syntax.
func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stores/{store_id}/auth/auth-code", s.withStore(s.handleRegister))
	mux.HandleFunc("POST /stores/{store_id}/auth/token", s.handleToken)
	mux.HandleFunc("OPTIONS /stores/{store_id}/auth/token", s.preflight(tokenCORS))
	mux.HandleFunc("GET /stores/{store_id}/auth/me", s.handleMe)
	mux.HandleFunc("OPTIONS /stores/{store_id}/auth/me", s.preflight(meCORS))
	mux.HandleFunc("POST /stores/{store_id}/auth/logout", s.handleLogout)
	mux.HandleFunc("GET /stores/{store_id}/auth/config", s.handleAuthConfig)
	mux.HandleFunc("OPTIONS /stores/{store_id}/auth/config", s.preflight(configCORS))
	mux.HandleFunc("GET /stores/{store_id}/auth/button.js", s.serveButton("button.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /stores/{store_id}/auth/button.css", s.serveButton("button.css", "text/css; charset=utf-8"))
	mux.HandleFunc("OPTIONS /stores/{store_id}/auth/logout", s.preflight(logoutCORS))
	mux.HandleFunc("GET /stores/{store_id}/auth/link", s.handleLink)
	mux.HandleFunc("GET /stores/{store_id}/auth/callback", s.handleCallback)
	mux.HandleFunc("GET /.well-known/apple-app-site-association", s.serveBody(func() []byte { return s.appleBody }))
	mux.HandleFunc("GET /.well-known/assetlinks.json", s.serveBody(func() []byte { return s.androidBody }))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"status": "ok"}})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() || s.draining.Load() {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "not ready", retryAfter: 1})
			return
		}
		if s.remoteFailing() {
			writeError(w, errStoreDown)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": map[string]string{"status": "ok"}})
	})
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	s.webhookRoutes(mux)
	s.settingsRoutes(mux)
	s.keysRoutes(mux)
	if s.cfg.Dashboard.Enabled {
		s.dashRoutes(mux)
	}
	if s.demo {
		s.demoRoutes(mux)
	}
	for _, add := range extraRoutes {
		add(mux)
	}
	mux.HandleFunc("/", s.notFound(mux))
	return mux
}

// isCleanPath reports whether p, a request's escaped path, is in the form
// the mux serves rather than one it would redirect from: no empty, "." or
// ".." segments. (The mux too looks at the escaped path: %2E%2E is a
// name, not "..".)
func isCleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// handler is the whole service: the routes behind logging, metrics and
// the request id (serving.RequestID), which the response carries in its
// X-Request-Id header and the log line as request_id.
func (s *server) handler() http.Handler {
	mux := s.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
		w.Header().Set(serving.RequestIDHeader, id)
		rw := &statusWriter{ResponseWriter: w}
		if !isCleanPath(r.URL.EscapedPath()) {
			// The mux would redirect to the cleaned path, a 307 with an
			// HTML body: to an API client a path not in its own form is
			// one it does not serve.
			writeError(rw, errNotFound)
		} else {
			mux.ServeHTTP(rw, r)
		}
		d := time.Since(start)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		s.metrics.Observe(r.Method, route, rw.code(), d)
		// Neither the query (codes, states) nor a path segment that is not
		// the route's own or a configured store id: a client may put a key
		// where the store id goes.
		pattern := ""
		if route != "unmatched" {
			_, pattern, _ = strings.Cut(route, " ") // a 405's route has no method: all is path
			if pattern == "" {
				pattern = route
			}
		}
		path := serving.LoggedPath(r.URL.Path, pattern, s.configuredStore)
		if s.logRequest != nil {
			s.logRequest(r, id, path, route, rw.code(), rw.n, start.Add(d), d)
		} else {
			serving.LogRequest(s.log, r, id, path, route, rw.code(), rw.n, start.Add(d), d)
		}
	})
}

// configuredStore reports whether id names a configured store: such an
// id is no secret, and a log line may show it.
func (s *server) configuredStore(id string) bool { return s.cfg.Store(id) != nil }

// notFound answers requests no route matched: 405 with Allow when the path
// exists under other methods, 404 otherwise, both as JSON errors.
func (s *server) notFound(mux *http.ServeMux) http.HandlerFunc {
	methods := []string{"GET", "POST", "PATCH", "DELETE", "OPTIONS"}
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		var path string
		for _, m := range methods {
			probe := *r // mux.Handler reads it only: no need of Clone's deep copy
			probe.Method = m
			if _, pat := mux.Handler(&probe); pat != "" && pat != "/" {
				allow = append(allow, m)
				_, path, _ = strings.Cut(pat, " ")
			}
		}
		if len(allow) > 0 {
			// Counted and logged under the route's path, without a
			// method: a client using the wrong one shows where.
			r.Pattern = path
			methodNotAllowed(w, r, allow...)
			return
		}
		writeError(w, errNotFound)
	}
}

// methodNotAllowed answers 405 with Allow: r's method is not one of allow.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow ...string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed here; use " + strings.Join(allow, " or ")})
}

func (s *server) serveBody(body func() []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b := body()
		if b == nil {
			writeError(w, errNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
}

// associationFiles renders the apple-app-site-association and
// assetlinks.json bodies (docs/api.md, association files), nil where no app is configured.
// The Apple file carries both the classic (appID, paths) and the iOS 13+
// (appIDs, components) forms, so every iOS version reads it.
func associationFiles(apps AppsConfig) (apple, android []byte) {
	if len(apps.Apple) > 0 {
		type detail struct {
			AppID      string              `json:"appID"`
			Paths      []string            `json:"paths"`
			AppIDs     []string            `json:"appIDs"`
			Components []map[string]string `json:"components"`
		}
		var details []detail
		for _, a := range apps.Apple {
			d := detail{AppID: a.AppID, Paths: a.Paths, AppIDs: []string{a.AppID}, Components: []map[string]string{}}
			if d.Paths == nil {
				d.Paths = []string{}
			}
			for _, p := range a.Paths {
				d.Components = append(d.Components, map[string]string{"/": p})
			}
			details = append(details, d)
		}
		apple, _ = json.Marshal(map[string]any{"applinks": map[string]any{"apps": []string{}, "details": details}})
	}
	if len(apps.Android) > 0 {
		type target struct {
			Namespace    string   `json:"namespace"`
			PackageName  string   `json:"package_name"`
			Fingerprints []string `json:"sha256_cert_fingerprints"`
		}
		type statement struct {
			Relation []string `json:"relation"`
			Target   target   `json:"target"`
		}
		var list []statement
		for _, a := range apps.Android {
			fp := a.SHA256CertFingerprints
			if fp == nil {
				fp = []string{}
			}
			list = append(list, statement{
				Relation: []string{"delegate_permission/common.handle_all_urls"},
				Target:   target{"android_app", a.PackageName, fp},
			})
		}
		android, _ = json.Marshal(list)
	}
	return apple, android
}

// recorder is an http.ResponseWriter that keeps the response in memory:
// the edge build's writer, and the dashboard's calls of the API.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
