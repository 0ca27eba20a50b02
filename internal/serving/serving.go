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
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
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
	s.conns.linger = linger
	return s
}

// Set makes h the handler of the requests that follow: the servers answer
// "starting" until their state is ready, on the listener they keep.
func (s *Server) Set(h http.Handler) { s.handler.set(h) }

// Serve serves on ln as http.Server's Serve does, through connections
// that Stop closes between requests only. It is called once.
func (s *Server) Serve(ln net.Listener) error {
	l := s.conns.listen(ln)
	defer l.served()
	return s.Server.Serve(l)
}

// Unready is the first step of a stop behind a load balancer: for d, or
// until cut is closed, stopping answers /readyz (503) while every other
// request is served as before, so that the balancer's health checks take
// the server out of rotation while it still answers what is sent its way.
// With d <= 0 it returns at once. Stop follows.
func (s *Server) Unready(stopping http.Handler, d time.Duration, cut <-chan struct{}) {
	if d <= 0 {
		return
	}
	current := *s.handler.h.Load()
	s.handler.set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			stopping.ServeHTTP(w, r)
			return
		}
		current.ServeHTTP(w, r)
	}))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cut:
	}
}

// Stop shuts the server down as both servers do on SIGTERM or SIGINT
// (docs/operations.md), after Unready when they wait for a load balancer.
// From now on stopping answers every request (503s with Retry-After:
// /readyz says the service is going, rather than a refused connection
// saying nothing), each response saying "Connection: close" and its
// connection closed after it. A connection waiting for a request (an idle
// keep-alive, a new one, or one whose response was under way when Stop
// began and so did not say so) is left open for its linger, so that a
// request its client sends meanwhile is answered too, and then closed
// without a reset: no request the server has read goes unanswered. Once
// the connections open when Stop began have closed (their requests under
// way answered), the listener closes, and Stop waits for the connections
// accepted meanwhile in the same way. Connections still busy when grace
// runs out are closed, so that none of them can answer once the caller
// has written the state without what it did (a request whose body is
// still arriving, say), and the error says so.
func (s *Server) Stop(stopping http.Handler, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// Not SetKeepAlivesEnabled(false): it closes the idle connections
	// at once, and each connection whose response was under way as soon
	// as it is written, though the response did not say so: the next
	// request its client sends meets a closed connection. Instead the
	// responses from now on say "Connection: close" (net/http then closes
	// the connection), and the connections waiting for a request linger.
	s.handler.set(closing{stopping})
	s.conns.drain()
	done := s.conns.wait(false, ctx.Done())
	if done {
		select {
		case <-s.conns.stopAccepting():
			done = s.conns.wait(true, ctx.Done())
		case <-ctx.Done():
			done = false
		}
	}
	// Nothing is left to answer: Shutdown closes the listener and
	// returns. (It drops any request a connection reads once it has
	// begun, which is why it comes last.)
	err := ctx.Err()
	if done {
		if err = s.Shutdown(ctx); err == nil {
			return nil
		}
	}
	s.Close()
	return err
}

// closing is a handler whose responses close their connection.
type closing struct{ http.Handler }

func (h closing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	h.Handler.ServeHTTP(w, r)
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
