//go:build wasip1 && edgefault

package main

// Test-only fault routes of the edge module, compiled in only with
// `-tags edgefault` (never in wasm/service.wasm): the contract tests build
// a module with them to check that a request the module fails on answers
// 500, that the host recovers a fresh instance from data_dir without
// losing acknowledged state, that a runaway call is cut off by the
// host's -call-timeout, and that a request whose changes cannot be written
// answers 503 and leaves nothing of itself behind.

import (
	"errors"
	"net/http"
	"os"
	"runtime"
	"unsafe"
)

// faultSink keeps the spinning loop's work observable, so it cannot be
// compiled away.
var faultSink uint64

// faultOffset is 3 GiB: that far past a global is beyond the linear
// memory the module has, so a store there is a wasm trap, not a Go panic.
var faultOffset = 3 << 30

// failPersist is the state of the /__fault/persist fault. The module runs
// one call at a time, so plain fields do.
var failPersist struct {
	armed bool // the route ran in this call; this call's own write succeeds
	due   bool // the next write fails
}

// errPersistFault is the write failure /__fault/persist stands in for.
var errPersistFault = errors.New("edgefault: writing state failed (injected)")

func init() {
	// The write after the one that ends the arming request fails once,
	// writing nothing: the instance then holds a change disk does not,
	// as when data_dir is full or read-only.
	persistFault = func() error {
		switch {
		case failPersist.due:
			failPersist.due = false
			return errPersistFault
		case failPersist.armed:
			failPersist.armed, failPersist.due = false, true
		}
		return nil
	}
	extraRoutes = append(extraRoutes, func(mux *http.ServeMux) {
		// A handler panic: the module's own recover answers 500.
		mux.HandleFunc("/__fault/panic", func(http.ResponseWriter, *http.Request) {
			panic("edgefault: panic in a handler")
		})
		// A panic on another goroutine: the Go runtime exits the whole
		// instance (proc_exit 2). os.Exit is the fallback should the
		// scheduler not run it.
		mux.HandleFunc("/__fault/crash", func(http.ResponseWriter, *http.Request) {
			go func() { panic("edgefault: panic in a goroutine") }()
			for range 1000 {
				runtime.Gosched()
			}
			os.Exit(3)
		})
		// A wasm trap (out-of-bounds memory access) the Go runtime never
		// sees.
		mux.HandleFunc("/__fault/trap", func(http.ResponseWriter, *http.Request) {
			*(*uint64)(unsafe.Add(unsafe.Pointer(&faultSink), faultOffset)) = 1
		})
		// The next request's changes cannot be written: that request
		// makes the instance exit with exitCannotPersist, and the host
		// answers 503. (A webhook outcome reported in between would take
		// the failure instead, without an exit; the contract case that
		// uses this has no webhooks.)
		mux.HandleFunc("POST /__fault/persist", func(w http.ResponseWriter, _ *http.Request) {
			failPersist.armed = true
			w.WriteHeader(http.StatusNoContent)
		})
		// A call that never returns.
		mux.HandleFunc("/__fault/spin", func(http.ResponseWriter, *http.Request) {
			for {
				faultSink++
			}
		})
	})
}
