// Package serving holds what the service's two HTTP servers share, the
// native build's (the root package) and the edge host's (wasm/), so that
// their connection limits and start-up behaviour cannot drift apart.
package serving

import (
	"net/http"
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
