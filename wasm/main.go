// Command wasm is the host of the edge build. It runs the service compiled
// to a WASI module (wasm/service.wasm, built from the root package by
// `go generate ./wasm`) under wazero, serving the same API as the native
// binary:
//
//	go generate ./wasm && go run ./wasm -config FILE [-module PATH] [-addr HOST:PORT] [-data DIR] [-instances N]
//
// The host owns the listener and hands each request to the module's
// exported handle function; the module's goroutines run only during such
// calls, so the host also drives the timed work (tick) and makes the
// module's outgoing webhook requests, under the same rules as the native
// build (internal/egress).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"

	"deeplink/internal/config"
	"deeplink/internal/egress"
	"deeplink/internal/serving"
	"deeplink/internal/store/hoststore"
	"deeplink/internal/webhook"
	"deeplink/internal/wire"
)

// The module never speaks HTTP/2 (the host owns every connection):
// nethttpomithttp2 leaves net/http's bundled HTTP/2 out of it, 1.2 MB.
//
//go:generate env GOOS=wasip1 GOARCH=wasm go build -tags nethttpomithttp2 -buildmode=c-shared -trimpath -ldflags=-s -o service.wasm ..

var (
	configFile  = flag.String("config", "", "the configuration `FILE`, as the native build reads it; without it, the module's embedded demo")
	modulePath  = flag.String("module", "wasm/service.wasm", "the edge module")
	addrFlag    = flag.String("addr", "", "listen address HOST:PORT, overriding the configuration's listen")
	dataFlag    = flag.String("data", "", "state directory, overriding the configuration's data_dir")
	cacheFlag   = flag.String("cache", "", "compilation cache directory (default: the user cache directory)")
	callTimeout = flag.Duration("call-timeout", 10*time.Second, "deadline of one call into the module: a call past it is cut off at its next call to the host, and the instance replaced; one that makes none ends the host (its watchdog kills it) for its supervisor to restart. 0 turns the deadline off, for platforms that bound CPU time themselves")
	instances   = flag.Int("instances", runtime.NumCPU(), "module instances serving requests in parallel (at least 1)")
)

// maxBody is what the host reads of a request body: one byte past the
// service's 64 KiB limit, so the module itself answers 413.
const maxBody = 64<<10 + 1

func main() {
	if arg := os.Getenv(watchdogEnv); arg != "" {
		os.Exit(watchdogMain(arg))
	}
	log.SetFlags(0)
	flag.Usage = func() { // named as it is run, not by go run's temporary path
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./wasm [-config FILE] [-module PATH] [-addr HOST:PORT] [-data DIR] [-cache DIR] [-call-timeout D] [-instances N]\n\nServes the edge module under wazero, with the native build's API. Flags:")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *instances < 1 {
		fmt.Fprintf(os.Stderr, "-instances %d: want at least 1\n", *instances)
		os.Exit(2)
	}
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
	cfg := &config.Config{Listen: "127.0.0.1:8080", DataDir: "data", MaxLiveEntries: 2_000_000}
	cfg.Webhooks.Timeout = config.Duration(10 * time.Second)
	cfg.Webhooks.AllowInsecureURLs = true // as the demo configuration
	cfg.Storage.Durability = "fsync"
	var cfgBytes []byte
	if *configFile != "" {
		var err error
		if cfgBytes, err = os.ReadFile(*configFile); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if cfg, err = config.Parse(cfgBytes); err != nil {
			return err
		}
	}
	if *addrFlag != "" {
		cfg.Listen = *addrFlag
	}
	if *dataFlag != "" {
		cfg.DataDir = *dataFlag
	}
	if cfg.Storage.Backend != "redis" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("data_dir: %w", err)
		}
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
	base := baseURL(ln, cfg)

	// The first signal ends ctx (as a failed Serve does, with stop); the
	// next one closes again, which cuts shutdown.delay short, as in the
	// native build.
	ctx, stop, again, release := serving.Signals()
	defer release()
	// Until the module is compiled and started (seconds on a cold cache),
	// /healthz answers 200 and everything else 503, as the native build
	// answers while it restores its state: probes see "starting".
	// Every request is counted here, whichever instance served it, as
	// the native server counts its own: an instance replaced takes no
	// counts with it.
	requests := &serving.Metrics{}
	srv := serving.NewServer(serveUnavailable(requests, "starting", "the service is starting (compiling its module); retry shortly")) // the native server's limits
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	start := time.Now()
	// The module compiles while the store reads data_dir back: a launch
	// waits for the longer of the two, not both. No call reaches backend
	// before both are done.
	backend := &hoststore.Backend{}
	type compiledModule struct {
		rt  wazero.Runtime
		cm  wazero.CompiledModule
		err error
	}
	compiling := make(chan compiledModule, 1)
	go func() {
		rt, cm, err := compile(context.Background(), wasmBytes, backend, client)
		compiling <- compiledModule{rt, cm, err}
	}()
	state, err := openState(cfg, cfg.DataDir)
	c := <-compiling
	if c.rt != nil {
		defer c.rt.Close(context.Background())
	}
	if err = cmp.Or(err, c.err); err != nil {
		if state != nil {
			state.close()
		}
		srv.Close()
		return err
	}
	defer state.close() // closed below, its error reported; again here, after a failure (a second close does nothing)
	if !state.remote {  // data_dir is this process's alone
		if err := webhook.ForgetHolds(context.Background(), state.store); err != nil {
			srv.Close()
			return fmt.Errorf("webhooks: %w", err)
		}
	}
	*backend = state.backend
	rt, compiled := c.rt, c.cm
	var dog *watchdog
	if *callTimeout > 0 {
		if dog, err = startWatchdog(*instances, *callTimeout); err != nil {
			srv.Close()
			return err
		}
		defer dog.stop()
	}
	h, err := newHost(state, dog, rt, compiled, *instances, wire.StartArgs{Config: cfgBytes, BaseURL: base, UserAgent: webhook.UserAgent})
	// A store that does not answer yet (Redis down) delays the start, as
	// in the native build: the host answers "starting" and tries again.
	for err != nil && state.backend.Failing != nil && state.backend.Failing() != nil {
		slog.Warn("the store does not answer: starting once it does", "err", err)
		select {
		case <-ctx.Done():
			if err := srv.Stop(serveUnavailable(requests, "stopping", "the service is shutting down; retry shortly"), 10*time.Second); err != nil {
				slog.Warn("shutdown: in-flight requests cut off", "err", err)
			}
			return nil
		case <-time.After(time.Second):
		}
		h, err = newHost(state, dog, rt, compiled, *instances, wire.StartArgs{Config: cfgBytes, BaseURL: base, UserAgent: webhook.UserAgent})
	}
	if err != nil {
		srv.Close()
		return err
	}
	h.client, h.requests = client, requests
	// The sender waits for a store that does not answer (Redis down)
	// as the instances do.
	for h.hooks, err = startHooks(cfg, state.store, !state.remote); err != nil && state.backend.Failing != nil && state.backend.Failing() != nil; h.hooks, err = startHooks(cfg, state.store, !state.remote) {
		slog.Warn("webhooks: the store does not answer: sending once it does", "err", err)
		select {
		case <-ctx.Done():
			h.stop()
			srv.Close()
			return nil
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		h.stop()
		srv.Close()
		return fmt.Errorf("webhooks: %w", err)
	}
	// The loops have their own end: they go on through shutdown.delay,
	// the module's timed work and webhooks with them, and end when the
	// stop proper begins.
	var loops sync.WaitGroup
	loopCtx, endLoop := context.WithCancel(context.Background())
	defer endLoop()
	// A signal while the module started: never ready, straight to the
	// shutdown, as the native build after a signal while restoring.
	ready := ctx.Err() == nil
	if ready {
		srv.Set(h)
		slog.Info("edge module ready", "addr", ln.Addr().String(), "module", *modulePath, "startup", time.Since(start).String())
		loops.Go(func() { h.loop(loopCtx) })
	}
	// The webhook housekeeping goes on until the sender stops, after the
	// requests under way are drained: it sends meanwhile.
	hooksCtx, endHooks := context.WithCancel(context.Background())
	hooksTicked := make(chan struct{})
	go func() { defer close(hooksTicked); tickHooks(hooksCtx, h.hooks) }()

	// Serve fails only when the listener does; the state is written all
	// the same, as after a signal.
	var serveFailed error
	stopping := serveUnavailable(requests, "stopping", "the service is shutting down; retry shortly")
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
	loops.Wait()
	endHooks()
	<-hooksTicked
	// The sender first: its attempts under way are cancelled, their
	// deliveries pending, to be sent after a restart.
	if err := errors.Join(stopHooks(h.hooks), h.stop(), state.close()); err != nil {
		return errors.Join(serveFailed, fmt.Errorf("writing state: %w", err))
	}
	if serveFailed != nil {
		return serveFailed
	}
	slog.Info("state written; bye")
	return nil
}

// baseURL is the public_base_url the host gives the module: for the demo
// configuration, a loopback name for ln's address; for a configuration
// that leaves it out, what cfg.PublicBase makes of ln's address (the
// module knows only the file's listen, which -addr may override); else "".
func baseURL(ln net.Listener, cfg *config.Config) string {
	if *configFile == "" {
		return "http://" + serving.DemoHost(ln.Addr().(*net.TCPAddr))
	}
	if cfg.PublicBaseURL != "" {
		return "" // the file's own
	}
	cfg.PublicBase(ln.Addr().String())
	return cfg.PublicBaseURL
}

// compile compiles the module once, through the compilation cache, in a
// runtime that provides it the WASI imports, deeplink_store, served by b,
// and deeplink_host, whose fetches go through client.
func compile(ctx context.Context, wasmBytes []byte, b *hoststore.Backend, client *http.Client) (wazero.Runtime, wazero.CompiledModule, error) {
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
		return nil, nil, fmt.Errorf("compilation cache: %w", err)
	}
	// No WithCloseOnContextDone: the deadline is kept at the host's
	// functions instead (instantiateWASI, and the watchdog).
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	if err := errors.Join(instantiateWASI(ctx, rt), instantiateStore(ctx, rt, b), instantiateHost(ctx, rt, client)); err != nil {
		rt.Close(ctx)
		return nil, nil, err
	}
	// On a cold cache, compiling takes seconds: on every CPU.
	compiled, err := rt.CompileModule(experimental.WithCompilationWorkers(ctx, runtime.NumCPU()), wasmBytes)
	if err != nil {
		rt.Close(ctx)
		return nil, nil, fmt.Errorf("module: %w", err)
	}
	if err := checkBuiltForHost(compiled); err != nil {
		rt.Close(ctx)
		return nil, nil, err
	}
	return rt, compiled, nil
}

// checkBuiltForHost refuses a module built before its host counted the
// requests: such a module counts its own, and /metrics would have every
// request family twice, which Prometheus rejects whole. (Other mismatches
// show as a missing export when an instance starts.)
func checkBuiltForHost(m wazero.CompiledModule) error {
	if _, old := m.ExportedFunctions()["metrics"]; old {
		return errors.New("module: built for an older host (it counts its own requests); rebuild it with `go generate ./wasm`")
	}
	return nil
}
