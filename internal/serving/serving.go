// Package serving holds what the service's two HTTP servers share, the
// native build's (the root package) and the edge host's (wasm/), so that
// their connection limits and start-up behaviour cannot drift apart.
package serving

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// NewServer returns a server for h with the service's connection limits.
// A slow client may hold a connection only so long: headers within 5 s, a
// whole (at most 64 KiB) request within 15 s. Handlers answer from memory,
// so 30 s to write is generous. Idle keep-alives go after 2 min. Headers
// are limited to 64 KiB, as bodies are.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// Switch is a handler that passes each request to its current target,
// which Set may replace while it serves: the servers answer "starting"
// until their state is ready, on the listener they will keep.
type Switch struct {
	h atomic.Pointer[http.Handler]
}

// NewSwitch returns a Switch to h.
func NewSwitch(h http.Handler) *Switch {
	s := new(Switch)
	s.Set(h)
	return s
}

// Set makes h the target of the requests that follow.
func (s *Switch) Set(h http.Handler) { s.h.Store(&h) }

func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.h.Load()).ServeHTTP(w, r) }

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
