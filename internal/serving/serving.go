// Package serving holds what the service's two HTTP servers share, the
// native build's (the root package) and the edge host's (wasm/), so that
// their connection limits and start-up behaviour cannot drift apart.
package serving

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Server is an http.Server with the service's connection limits, whose
// handler can be replaced while it serves (Set) and which stops as Stop
// says.
type Server struct {
	*http.Server
	handler handlerSwitch
	conns   conns
}

// NewServer returns a server for h with the service's connection limits:
// net/http's own timeouts, which bound how long a slow or silent client
// holds a connection and its goroutine.
func NewServer(h http.Handler) *Server {
	s := new(Server)
	s.handler.set(h)
	s.Server = &http.Server{
		Handler: &s.handler,
		// Every client sends its few headers at once; one that trickles
		// them (slowloris) holds a connection for nothing. 5 s is
		// generous for a slow mobile link and short enough that such
		// clients cannot pile up.
		ReadHeaderTimeout: 5 * time.Second,
		// The whole request, body included: at most 64 KiB of body
		// (every handler's limit), which even a poor link sends in a
		// few seconds.
		ReadTimeout: 15 * time.Second,
		// From the end of the request's headers to the end of the
		// response: handlers answer from memory (a redemption waits for
		// one fsync), so this only cuts off a client that stops reading.
		WriteTimeout: 30 * time.Second,
		// Keep-alive connections of the game backends and webshops are
		// reused within seconds; one idle for 2 min is given up, as a
		// load balancer in front usually does sooner.
		IdleTimeout: 2 * time.Minute,
		// As large as a body may be; net/http's default is 1 MiB.
		MaxHeaderBytes: 64 << 10,
		ConnState:      s.conns.track,
	}
	return s
}

// Set makes h the handler of the requests that follow: the servers answer
// "starting" until their state is ready, on the listener they keep.
func (s *Server) Set(h http.Handler) { s.handler.set(h) }

// Stop shuts the server down as both servers do on SIGTERM or SIGINT
// (docs/operations.md). Until the requests under way finish, the listener
// stays open and stopping answers whoever asks (503s with Retry-After:
// /readyz says the service is going, rather than a refused connection
// saying nothing), each connection closing after its request. Then the
// listener closes and Stop waits for what is left; connections still busy
// when grace runs out are closed, so that none of them can answer once the
// caller has written the state without what it did (a request whose body
// is still arriving, say), and the error says so.
func (s *Server) Stop(stopping http.Handler, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.handler.set(stopping)
	s.SetKeepAlivesEnabled(false) // closes the idle connections
	select {
	case <-s.conns.drain():
	case <-ctx.Done():
	}
	if err := s.Shutdown(ctx); err != nil {
		s.Close()
		return err
	}
	return nil
}

// conns tracks a server's open connections, through its ConnState hook,
// so that Stop can wait for those open when it began.
type conns struct {
	mu      sync.Mutex // guards the fields below
	open    map[net.Conn]struct{}
	old     map[net.Conn]struct{} // open when drain was called, not closed since
	drained chan struct{}         // closed when old is empty; nil before drain
}

// track is the server's ConnState hook. It returns at once for a request's
// start and end (StateActive, StateIdle), which are on every request's path.
func (c *conns) track(nc net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		c.mu.Lock()
		if c.open == nil {
			c.open = make(map[net.Conn]struct{})
		}
		c.open[nc] = struct{}{}
		c.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		c.mu.Lock()
		delete(c.open, nc)
		if _, ok := c.old[nc]; ok {
			delete(c.old, nc)
			if len(c.old) == 0 {
				close(c.drained)
			}
		}
		c.mu.Unlock()
	}
}

// drain returns a channel that is closed once every connection open now
// has closed. It is called once.
func (c *conns) drain() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drained = make(chan struct{})
	c.old = maps.Clone(c.open)
	if len(c.old) == 0 {
		close(c.drained)
	}
	return c.drained
}

// handlerSwitch is a handler that passes each request to its current
// target, which set may replace while it serves. The zero value must be
// set before it serves.
type handlerSwitch struct {
	h atomic.Pointer[http.Handler]
}

// set makes h the target of the requests that follow.
func (s *handlerSwitch) set(h http.Handler) { s.h.Store(&h) }

func (s *handlerSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// DemoHost is HOST:PORT for the demo configuration's links to a listener
// at a: its store allows http redirects to 127.0.0.1 and localhost only,
// so a listener on every address (0.0.0.0, ::) is reached at 127.0.0.1,
// and one on ::1 at localhost. Any other address is returned as it is,
// with a warning: the demo's sign-in cannot work there.
func DemoHost(a *net.TCPAddr) string {
	port := strconv.Itoa(a.Port)
	switch {
	case a.IP.IsUnspecified(), a.IP.Equal(net.IPv4(127, 0, 0, 1)):
		return "127.0.0.1:" + port
	case a.IP.Equal(net.IPv6loopback):
		return "localhost:" + port
	}
	slog.Warn("the demo's sign-in needs a loopback address: its store allows http redirects to 127.0.0.1 and localhost only", "listen", a.String())
	return a.String()
}

// Unavailable answers r as both servers do while they cannot serve it:
// while they start (the native one restoring its state, the edge host
// compiling its module) and while they stop (Server.Stop). It returns
// the status it answered and the body's bytes: /healthz 200; anything else 503 with
// Retry-After, in the form its endpoint answers errors in: the
// token endpoint's OAuth's (temporarily_unavailable), the callback's a
// page for the browser, the rest the service's JSON error (unavailable).
// why says what it waits for. The caller logs the request.
func Unavailable(w http.ResponseWriter, r *http.Request, why string) (status, n int) {
	h := w.Header()
	storeRoute := func(p string) bool { ok, _ := path.Match("/stores/*/auth/"+p, r.URL.Path); return ok }
	var body []byte
	switch {
	case r.URL.Path == "/healthz":
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		n, _ := io.WriteString(w, `{"data":{"status":"ok"}}`+"\n")
		return http.StatusOK, n
	case storeRoute("token"):
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		body, _ = json.Marshal(map[string]string{"error": "temporarily_unavailable", "error_description": why})
	case storeRoute("callback"):
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		body = []byte("<!doctype html>\n<meta charset=\"utf-8\"><title>Sign-in failed</title>\n<h1>Sign-in failed</h1>\n<p>" + html.EscapeString(why) + "</p>")
	default:
		h.Set("Content-Type", "application/json")
		body, _ = json.Marshal(map[string]any{"error": map[string]string{"code": "unavailable", "message": why}})
	}
	h.Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	n, _ = w.Write(append(body, '\n'))
	return http.StatusServiceUnavailable, n
}

// MaxLoggedPath is the most of a request's path its log line shows: a
// path may be nearly 64 KiB, and anyone can send one.
const MaxLoggedPath = 512

// CutPath is p, a request's path (decoded), as a log line shows it: cut at
// MaxLoggedPath bytes, and before a '?' or '#', which only percent-encoding
// puts in a path (a client that escaped its query string into the path,
// codes and states with it), saying how long it was. Both builds' log lines
// use it.
func CutPath(p string) string {
	n := min(len(p), MaxLoggedPath)
	for n < len(p) && n > 0 && !utf8.RuneStart(p[n]) {
		n-- // not mid-character: the log would show U+FFFD
	}
	if i := strings.IndexAny(p[:n], "?#"); i >= 0 {
		n = i
	}
	if n == len(p) {
		return p
	}
	return p[:n] + "…(" + strconv.Itoa(len(p)) + " bytes)"
}
