package main

// The edge build: the service as a WASI reactor module
// (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared) that the wazero host in
// wasm/ drives. The host owns the listener and calls handle with each
// request; the module has no goroutines of its own between calls, so the
// host also calls tick for the timed work. The module makes webhook
// deliveries; the host's own sender sends them (wasip1 has no outgoing
// sockets), from the queue in the host's store.
//
// Calling convention: the host asks for an input buffer with buffer(n),
// writes n bytes there and calls a function with n. Functions that answer
// return ptr<<32 | len of a result that stays valid until the next call.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unsafe"

	"deeplink/internal/serving"
	"deeplink/internal/store"
	"deeplink/internal/webhook"
	"deeplink/internal/wire"
)

var edge struct {
	app     *app
	handler http.Handler
	in, out []byte
	worker  bool // serves no webhook state (wire.StartArgs.Worker)

	logPath, logRoute string // of the request handle serves, for its host to log
}

// main is never called: a reactor's host calls its exports, after
// _initialize. The command is main.go, of the native build.
func main() {}

// result keeps b for the host and returns its address and length.
func result(b []byte) uint64 {
	edge.out = b
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))<<32 | uint64(len(b))
}

//go:wasmexport buffer
func wasmBuffer(n uint32) uint32 {
	if uint32(cap(edge.in)) < n || n == 0 {
		edge.in = make([]byte, max(n, 4096))
	}
	edge.in = edge.in[:n]
	return uint32(uintptr(unsafe.Pointer(&edge.in[:cap(edge.in)][0])))
}

// wasmStart loads the configuration and opens the host's store (the
// primary also reads the webhook state back from it). It returns "" or
// the error, one line naming the bad field.
//
//go:wasmexport start
func wasmStart(n uint32) (res uint64) {
	defer func() {
		if p := recover(); p != nil {
			res = result(fmt.Appendf(nil, "panic: %v", p))
		}
	}()
	var args wire.StartArgs
	if err := json.Unmarshal(edge.in[:n], &args); err != nil {
		return result([]byte("start: " + err.Error()))
	}
	demo := len(args.Config) == 0
	if demo {
		args.Config = demoConfig
	}
	cfg, err := ParseConfig(args.Config)
	if err != nil {
		return result([]byte(err.Error()))
	}
	if args.BaseURL != "" && (demo || cfg.PublicBaseURL == "") {
		cfg.PublicBaseURL = args.BaseURL // the host's, for where it listens
	}
	if demo && args.BaseURL != "" {
		cfg.Stores[0].GameAuthorizeURL = args.BaseURL + "/demo/game/authorize"
	}
	logger := newLogger(logOut)
	slog.SetDefault(logger)
	a, err := openApp(cfg, logger, demo)
	if err != nil {
		return result([]byte(err.Error()))
	}
	if !args.Worker {
		for _, w := range a.srv.configWarnings() { // once, not once per instance
			logger.Warn(w)
		}
	}
	// The host's sender sends the deliveries the module makes; the log
	// shows the requests as the host sends them.
	a.srv.hooks.NoSend = true
	if args.UserAgent != "" {
		webhook.UserAgent = args.UserAgent
	}
	if wrapStore != nil {
		a.srv.store = wrapStore(a.srv.store)
	}
	// The host counts every request it answers, whichever instance
	// served it (an instance replaced would take its counts with it);
	// the module's /metrics has only the state's gauges.
	a.srv.metrics = nil
	a.srv.ready.Store(true)
	// The host writes each request's line, natively (wire.Response).
	a.srv.logRequest = func(_ *http.Request, _, path, route string, _ int, _ int64, _ time.Time, _ time.Duration) {
		edge.logPath, edge.logRoute = path, route
	}
	edge.app, edge.handler, edge.worker = a, a.srv.handler(), args.Worker
	if demo && args.BaseURL != "" && !args.Worker {
		printDemoBanner(cfg, args.BaseURL)
	}
	return result(nil)
}

// wasmHandle serves one request framed by wire.AppendRequest and returns
// the response framed by wire.AppendResponse. A panic answers 500; what
// the handler had changed in the store before it stays changed, as in the
// native build.
//
//go:wasmexport handle
func wasmHandle(n uint32) uint64 {
	req, err := wire.ParseRequest(edge.in[:n])
	rec := &recorder{header: http.Header{}}
	switch {
	case err != nil:
		rec.status = http.StatusBadRequest
	case edge.worker && wire.Primary(wire.RoutePath(pathOf(req.URI))):
		// The host sends these to the primary: a worker's empty webhook
		// state must never answer for the real one.
		writeError(rec, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error: request sent to a worker instance"})
	default:
		serveEdge(rec, req)
	}
	resp := &wire.Response{Status: rec.code(), Header: rec.header, Body: rec.body.Bytes(), LogPath: edge.logPath, LogRoute: edge.logRoute}
	edge.logPath, edge.logRoute = "", ""
	return result(wire.AppendResponse(edge.out[:0], resp))
}

func serveEdge(rec *recorder, req *wire.Request) {
	defer func() {
		if p := recover(); p != nil {
			path, _, _ := strings.Cut(req.URI, "?") // the query may carry codes and states
			edge.app.srv.log.Error("handler panicked", "panic", fmt.Sprint(p), "path", serving.LoggedPath(path, "", nil),
				"request_id", req.Header.Get(serving.RequestIDHeader)) // the host's: always a valid one
			*rec = recorder{header: http.Header{}}
			writeError(rec, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"})
		}
	}()
	r, err := http.NewRequest(req.Method, req.URI, bytes.NewReader(req.Body))
	if err != nil {
		writeError(rec, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "malformed request"})
		return
	}
	r.RequestURI = req.URI
	r.Header = req.Header
	r.RemoteAddr = req.RemoteAddr
	r.Host = req.Header.Get("Host")
	r.ContentLength = int64(len(req.Body))
	edge.handler.ServeHTTP(rec, r)
}

// wrapStore, when set, wraps the store the handlers use. Only the
// edgefault build (faults_edgefault.go) sets it, to make a change fail;
// in wasm/service.wasm it is nil.
var wrapStore func(store.Store) store.Store

// pathOf is the path of a request URI (path and query, as sent).
func pathOf(uri string) string {
	p, _, _ := strings.Cut(uri, "?")
	return p
}

// wasmTick does the timed work due at now (unix nanoseconds), at most
// once a second: the guards' sweeps, the fairness counts written, the
// webhook housekeeping. It returns nothing.
//
//go:wasmexport tick
func wasmTick(nowNanos int64) uint64 {
	now := time.Unix(0, nowNanos)
	if a := edge.app; now.Sub(a.lastTick) >= time.Second {
		a.tick(now)
	}
	return result(nil)
}

// wasmStop writes what the instance holds (its share of the fairness
// counts). The host calls nothing after it but
// a request the stop cut off, which draining answers 503. It returns ""
// or the error.
//
//go:wasmexport stop
func wasmStop() uint64 {
	edge.app.srv.draining.Store(true)
	defer logOut.Flush()
	if err := edge.app.Close(); err != nil { // started nothing, so it only writes the state
		return result([]byte(err.Error()))
	}
	return result(nil)
}
