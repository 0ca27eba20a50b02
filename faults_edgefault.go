//go:build wasip1 && edgefault

package main

// Test-only fault routes of the edge module, compiled in only with
// `-tags edgefault` (never in wasm/service.wasm): the contract tests build
// a module with them to check that a request the module fails on answers
// 500, that the host recovers a fresh instance from data_dir without
// losing acknowledged state, and that a runaway call is cut off by the
// host's -call-timeout.

import (
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

func init() {
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
		// A call that never returns.
		mux.HandleFunc("/__fault/spin", func(http.ResponseWriter, *http.Request) {
			for {
				faultSink++
			}
		})
	})
}
