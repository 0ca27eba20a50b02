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
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"time"
	"unsafe"

	"deeplink/internal/store"
)

// faultSink keeps the spinning loop's work observable, so it cannot be
// compiled away.
var faultSink uint64

// faultOffset is 3 GiB: that far past a global is beyond the linear
// memory the module has, so a store there is a wasm trap, not a Go panic.
var faultOffset = 3 << 30

// faultKey, put by /__fault/persist, makes the next change to the store
// fail as a failed write would, changing nothing: kept in the host's
// store, so that it holds whichever instance serves that change.
const faultKey = "fault:persist"

// errPersistFault is the write failure /__fault/persist stands in for.
var errPersistFault = fmt.Errorf("%w: edgefault: writing state failed (injected)", store.ErrUnavailable)

// faultyStore is the store of a module built with edgefault: its next
// change fails once /__fault/persist asks.
type faultyStore struct{ store.Store }

func (f faultyStore) fail() bool {
	_, err := f.Store.Take(context.Background(), faultKey)
	return err == nil
}

func (f faultyStore) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	if f.fail() {
		return errPersistFault
	}
	return f.Store.Insert(ctx, key, val, exp)
}

func (f faultyStore) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	if f.fail() {
		return errPersistFault
	}
	return f.Store.Put(ctx, key, val, exp)
}

func (f faultyStore) Swap(ctx context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	if f.fail() {
		return nil, errPersistFault
	}
	return f.Store.Swap(ctx, key, val, exp)
}

func init() {
	wrapStore = func(st store.Store) store.Store { return faultyStore{st} }
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
		mux.HandleFunc("POST /__fault/persist", func(w http.ResponseWriter, _ *http.Request) {
			if err := edge.app.store.Put(context.Background(), faultKey, []byte{1}, time.Time{}); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		// A call that never returns, reading the clock as it goes.
		mux.HandleFunc("/__fault/spin", func(http.ResponseWriter, *http.Request) {
			for {
				faultSink += uint64(time.Now().UnixNano())
			}
		})
		// A call that never returns and never calls the host.
		mux.HandleFunc("/__fault/spin-bare", func(http.ResponseWriter, *http.Request) {
			for {
				faultSink++
			}
		})
	})
}
