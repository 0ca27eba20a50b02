// Command wasm is the host of the edge build. It runs the service compiled
// to a WASI module (wasm/service.wasm, built from the root package by
// `go generate ./wasm`) under wazero, serving the same API as the native
// binary:
//
//	go generate ./wasm && go run ./wasm -config FILE [-module PATH] [-addr HOST:PORT] [-data DIR]
//
// The host owns the listener and hands each request to the module's
// exported handle function; the module's goroutines run only during such
// calls, so the host also drives the timed work (tick) and makes the
// module's outgoing webhook requests, under the same rules as the native
// build (internal/egress).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"deeplink/internal/config"
	"deeplink/internal/egress"
	"deeplink/internal/serving"
	"deeplink/internal/wire"
)

//go:generate env GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags=-s -o service.wasm ..

var (
	configFile  = flag.String("config", "", "the configuration `FILE`, as the native build reads it; without it, the module's embedded demo")
	modulePath  = flag.String("module", "wasm/service.wasm", "the edge module")
	addrFlag    = flag.String("addr", "", "listen address HOST:PORT, overriding the configuration's listen")
	dataFlag    = flag.String("data", "", "state directory, overriding the configuration's data_dir")
	cacheFlag   = flag.String("cache", "", "compilation cache directory (default: the user cache directory)")
	callTimeout = flag.Duration("call-timeout", 10*time.Second, "deadline of one call into the module; a call past it is aborted and the module restarted. 0 turns the deadline off: calls run about 4x faster, for platforms that bound CPU time themselves")
)

// exitCannotPersist is the module's exit code when it cannot write a
// change it made (EX_TEMPFAIL): the host answers 503 and restarts it.
const exitCannotPersist = 75

// maxBody is what the host reads of a request body: one byte past the
// service's 64 KiB limit, so the module itself answers 413.
const maxBody = 64<<10 + 1

func main() {
	log.SetFlags(0)
	flag.Usage = func() { // named as it is run, not by go run's temporary path
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./wasm [-config FILE] [-module PATH] [-addr HOST:PORT] [-data DIR] [-cache DIR] [-call-timeout D]\n\nServes the edge module under wazero, with the native build's API. Flags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected argument %q: the host takes flags only\n", flag.Arg(0))
		os.Exit(2)
	}
	// As the native build does: a log reader gone costs the log, not the
	// process (SIGPIPE) and with it the instance's state.
	signal.Ignore(syscall.SIGPIPE)
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil))) // the module's lines are JSON too
	serving.IgnoreHangups()
	if err := run(); err != nil {
		// slog rather than log.Fatal, which slog.SetDefault turns into a
		// line of level INFO.
		slog.Error(err.Error())
		os.Exit(1)
	}
}

func run() error {
	// The file is checked whole here, before anything listens,
	// by the same code as the module's; the module reads it again.
	cfg := &config.Config{Listen: "127.0.0.1:8080", DataDir: "data"}
	cfg.Webhooks.Timeout = config.Duration(10 * time.Second)
	cfg.Webhooks.AllowInsecureURLs = true // as the demo configuration
	var cfgBytes []byte
	if *configFile != "" {
		var err error
		if cfgBytes, err = os.ReadFile(*configFile); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if cfg, err = config.Parse(cfgBytes); err != nil {
			return err
		}
		if cfg.Storage.Backend == "redis" { // the module would refuse it at its start
			return errors.New(`config: storage.backend: "redis" is not in the edge build yet; use "embedded", or the native binary`)
		}
	}
	if *addrFlag != "" {
		cfg.Listen = *addrFlag
	}
	if *dataFlag != "" {
		cfg.DataDir = *dataFlag
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	wasmBytes, err := os.ReadFile(*modulePath)
	if err != nil {
		return fmt.Errorf("module: %w (build it with `go generate ./wasm`)", err)
	}
	client, err := egress.NewClient(egress.Options{
		Timeout: cfg.Webhooks.Timeout.D(), AllowPrivate: cfg.Webhooks.AllowInsecureURLs,
		TrustedCAFile: cfg.Webhooks.TrustedCAFile, MaxIdleConnsPerHost: 32,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	// The first signal ends ctx (as a failed Serve does, with stop); the
	// next one closes again, which cuts shutdown.delay short, as in the
	// native build.
	ctx, stop, again, release := serving.Signals()
	defer release()
	// Until the module is compiled and started (seconds on a cold cache),
	// /healthz answers 200 and everything else 503, as the native build
	// answers while it restores its state: probes see "starting".
	srv := serving.NewServer(serveUnavailable("starting", "the service is starting (compiling its module); retry shortly")) // the native server's limits
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	start := time.Now()
	h, err := newHost(context.Background(), wasmBytes, cfg.DataDir, wire.StartArgs{Config: cfgBytes, DataDir: "/data", BaseURL: baseURL(ln)})
	if err != nil {
		srv.Close()
		return err
	}
	defer h.close()
	h.client = client
	loopDone := make(chan struct{})
	// The loop has its own end: it goes on through shutdown.delay, the
	// module's timed work and webhooks with it, and ends when the stop
	// proper begins.
	loopCtx, endLoop := context.WithCancel(context.Background())
	defer endLoop()
	// A signal while the module started: never ready, straight to the
	// shutdown, as the native build after a signal while restoring.
	ready := ctx.Err() == nil
	if ready {
		srv.Set(h)
		slog.Info("edge module ready", "addr", ln.Addr().String(), "module", *modulePath, "startup", time.Since(start).String())
		go func() { defer close(loopDone); h.loop(loopCtx) }()
	} else {
		close(loopDone)
	}

	// Serve fails only when the listener does; the state is written all
	// the same, as after a signal.
	var serveFailed error
	stopping := serveUnavailable("stopping", "the service is shutting down; retry shortly")
	select {
	case serveFailed = <-serveErr:
		stop() // a signal from now on is the second
	case <-ctx.Done():
		// /readyz 503 first, the rest served, as in the native build.
		if d := cfg.Shutdown.Delay.D(); d > 0 && ready {
			slog.Info("shutting down: /readyz answers 503, requests are served until shutdown.delay has passed", "delay", d.String())
			srv.Unready(stopping, d, again)
		}
		slog.Info("shutting down")
	}
	endLoop()
	if err := srv.Stop(stopping, 10*time.Second); err != nil {
		slog.Warn("shutdown: in-flight requests cut off", "err", err)
	}
	<-loopDone // webhook requests under way are cancelled and reported
	if err := h.stop(); err != nil {
		return errors.Join(serveFailed, fmt.Errorf("writing state: %w", err))
	}
	if serveFailed != nil {
		return serveFailed
	}
	slog.Info("state written; bye")
	return nil
}

// baseURL is the URL the module's demo configuration links to: a
// loopback name for ln's address. A configuration given with -config has
// its own public_base_url, and gets "".
func baseURL(ln net.Listener) string {
	if *configFile != "" {
		return ""
	}
	return "http://" + serving.DemoHost(ln.Addr().(*net.TCPAddr))
}

// host runs one instance of the module at a time and serialises the calls
// into it: a wasm instance runs one call at a time.
type host struct {
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	dataDir  string
	args     wire.StartArgs
	client   *http.Client
	kick     chan struct{} // asks the loop to tick now
	// instances counts the instances started: the loop cancels the
	// requests of one replaced, whose outcomes its successor, knowing
	// none of their jobs, would drop (it sends what is pending again).
	instances atomic.Uint64

	mu  sync.Mutex // guards the fields below
	mod api.Module // nil after a failed start or restart
	fn  map[string]api.Function
}

var exports = []string{"buffer", "start", "handle", "tick", "finish", "wake", "stop"}

// newHost compiles the module once (through the compilation cache) and
// starts an instance of it.
func newHost(ctx context.Context, wasmBytes []byte, dataDir string, args wire.StartArgs) (*host, error) {
	dir := *cacheFlag
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "deeplink", "wazero")
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("compilation cache: %w", err)
	}
	// With a deadline, wazero compiles a termination check into every
	// function entry and loop, so a runaway call can be aborted; it costs
	// about 4x in call time (README).
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithCloseOnContextDone(*callTimeout > 0))
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	compiled, err := rt.CompileModule(ctx, wasmBytes)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("module: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		rt.Close(ctx)
		return nil, err
	}
	h := &host{rt: rt, compiled: compiled, dataDir: abs, args: args, kick: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.instantiateLocked(); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return h, nil
}

// ensureDataDir recreates data_dir if it has been removed, before an
// instance starts: an instance cannot open a missing directory as its
// /data, and could then not write at all. (A running instance recreates
// it itself, through the mount, and writes its whole state there again:
// repairDataDir.)
func (h *host) ensureDataDir() {
	if _, err := os.Stat(h.dataDir); errors.Is(err, fs.ErrNotExist) {
		slog.Warn("data_dir has disappeared; recreating it", "data_dir", h.dataDir)
		if err := os.MkdirAll(h.dataDir, 0o700); err != nil {
			slog.Error("data_dir: cannot recreate it", "err", err)
		}
	}
}

// instantiateLocked starts a fresh instance, which restores the state
// from data_dir. h.mu must be held.
func (h *host) instantiateLocked() error {
	ctx := context.Background()
	h.ensureDataDir()
	h.instances.Add(1)
	if h.mod != nil {
		h.mod.Close(ctx)
		h.mod = nil
	}
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous, so a replacement can be instantiated
		WithStartFunctions("_initialize").
		// wazero's defaults are a fake clock and a deterministic random
		// source: codes, secrets and TTLs need the real ones.
		WithSysWalltime().
		WithSysNanotime().
		WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStdout(os.Stdout).
		WithStderr(os.Stderr).
		WithArgs("deeplink").
		WithFSConfig(wazero.NewFSConfig().WithDirMount(h.dataDir, "/data"))
	mod, err := h.rt.InstantiateModule(ctx, h.compiled, cfg)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	fn := map[string]api.Function{}
	for _, name := range exports {
		if fn[name] = mod.ExportedFunction(name); fn[name] == nil {
			mod.Close(ctx)
			return fmt.Errorf("module: no export %q; is it the edge build of this version?", name)
		}
	}
	h.mod, h.fn = mod, fn
	args, _ := json.Marshal(h.args)
	msg, err := h.callLocked("start", args)
	if err == nil && len(msg) > 0 {
		err = errors.New(string(msg))
	}
	if err != nil { // a half-started instance must not serve
		mod.Close(ctx)
		h.mod = nil
	}
	return err
}

// callLocked calls export name with in as its input buffer and returns its
// result, copied out of the module's memory. A trap, a panic that escaped
// the module or a call past the deadline closes the instance; the caller
// restarts it. h.mu must be held.
func (h *host) callLocked(name string, in []byte, args ...uint64) ([]byte, error) {
	if h.mod == nil {
		return nil, errors.New("module is not running")
	}
	ctx, cancel := callContext(name)
	defer cancel()
	if in != nil {
		res, err := h.fn["buffer"].Call(ctx, uint64(len(in)))
		if err != nil {
			return nil, err
		}
		if !h.mod.Memory().Write(uint32(res[0]), in) {
			return nil, errors.New("module buffer out of range")
		}
		args = append([]uint64{uint64(len(in))}, args...)
	}
	res, err := h.fn[name].Call(ctx, args...)
	if err != nil || len(res) == 0 {
		return nil, err
	}
	ptr, n := uint32(res[0]>>32), uint32(res[0])
	if n == 0 {
		return nil, nil
	}
	b, ok := h.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, errors.New("module result out of range")
	}
	return append([]byte(nil), b...), nil
}

// callContext is the context of one call into the module, export name:
// with the -call-timeout deadline, if any, except for start. Start
// restores the whole state from data_dir, which takes seconds for a large
// store (about 16 s for a million codes without the deadline's checks):
// under the deadline a store past about half a million codes could
// neither start nor recover from a failed call, and every request would
// wait for another restore cut short.
func callContext(name string) (context.Context, context.CancelFunc) {
	if *callTimeout > 0 && name != "start" {
		return context.WithTimeout(context.Background(), *callTimeout)
	}
	return context.Background(), func() {}
}

// call runs callLocked and, when the instance failed, replaces it with a
// fresh one restored from data_dir (which the module writes before it
// answers each request).
func (h *host) call(name string, in []byte, args ...uint64) ([]byte, error) {
	out, _, err := h.callIn(name, in, args...)
	return out, err
}

// callIn is call, and also returns the instance the call went to (its
// number in h.instances). Read under h.mu, it is the one that ran the
// call even when a failed call on another goroutine replaced the one
// there before: the loop tags a tick's jobs with it.
func (h *host) callIn(name string, in []byte, args ...uint64) (out []byte, instance uint64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	instance = h.instances.Load()
	out, err = h.callLocked(name, in, args...)
	if err != nil {
		slog.Error("edge module failed; restarting it from data_dir", "call", name, "err", err)
		if rerr := h.instantiateLocked(); rerr != nil {
			slog.Error("edge module restart failed", "err", rerr)
		}
	}
	return out, instance, err
}

func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The id is decided here, so that an answer of the host's own (below)
	// carries it too; the module keeps it, a valid one, as its own.
	id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
	w.Header().Set(serving.RequestIDHeader, id)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		h.answer(w, r, id, start, http.StatusBadRequest, `{"error":{"code":"invalid_request","message":"could not read the body"}}`)
		return
	}
	hdr := r.Header.Clone()
	hdr.Set("Host", r.Host)
	hdr.Set(serving.RequestIDHeader, id)
	in := wire.AppendRequest(nil, &wire.Request{Method: r.Method, URI: r.RequestURI, RemoteAddr: r.RemoteAddr, Header: hdr, Body: body})
	out, err := h.call("handle", in)
	var resp *wire.Response
	if err == nil {
		resp, err = wire.ParseResponse(out)
	}
	if err != nil {
		var exit *sys.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == exitCannotPersist {
			// The module could not write what it was about to acknowledge,
			// and exited so its replacement starts from what is on disk.
			w.Header().Set("Retry-After", "1")
			h.answer(w, r, id, start, http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"the service cannot persist its state; retry later"}}`)
			return
		}
		h.answer(w, r, id, start, http.StatusInternalServerError, `{"error":{"code":"internal","message":"internal error"}}`)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.pokeIfDue()
	}
}

// answer sends an error of the host's own, body a JSON error, when the
// module did not answer r, and logs r's line with the route "host": the
// module logged none, or one for an answer it could not give.
func (h *host) answer(w http.ResponseWriter, r *http.Request, id string, start time.Time, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	n, _ := io.WriteString(w, body+"\n")
	d := time.Since(start)
	serving.LogRequest(slog.Default(), r, id, serving.LoggedPath(r.URL.Path, "", nil), "host", status, int64(n), start.Add(d), d)
}

// pokeIfDue asks the loop to tick now when the module has a webhook
// delivery that became due.
func (h *host) pokeIfDue() {
	h.mu.Lock()
	var due bool
	if h.mod != nil {
		ctx, cancel := callContext("wake")
		res, err := h.fn["wake"].Call(ctx)
		cancel()
		due = err == nil && len(res) == 1 && res[0] == 1
	}
	h.mu.Unlock()
	if due {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// serveUnavailable answers while the module is compiled and started, and
// while the host shuts down, as the native build does then
// (serving.Unavailable), why saying which. It logs each request, with
// route as its route.
func serveUnavailable(route, why string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
		w.Header().Set(serving.RequestIDHeader, id)
		status, n := serving.Unavailable(w, r, why)
		d := time.Since(start)
		serving.LogRequest(slog.Default(), r, id, serving.LoggedPath(r.URL.Path, "", nil), route, status, int64(n), start.Add(d), d)
	})
}

// stop has the module write its state.
func (h *host) stop() error {
	out, err := h.call("stop", nil)
	if err != nil {
		return err
	}
	if len(out) > 0 {
		return errors.New(string(out))
	}
	return nil
}

func (h *host) close() { h.rt.Close(context.Background()) }
