//go:build !wasip1

// Command deeplink signs players into a webshop from the game app through
// a deep link with PKCE, and tells merchants' servers about store events
// with signed webhooks. See README.md and docs/.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"deeplink/internal/serving"
	"deeplink/internal/store"
)

func main() {
	log.SetFlags(0)
	os.Exit(doMain(os.Stdin, os.Stdout, os.Stderr, os.Args[1:]))
}

// run serves with the configuration and overrides of f until a signal
// stops it, and returns what made it stop otherwise.
func run(f serveFlags) error {
	// Signals are caught from the start: a SIGTERM while the state is
	// restored (a while, for a large store, with /healthz already up)
	// ends the start-up as it would end serving, state written, exit 0.
	// The first ends ctx (as a failed Serve does, with stop); the next
	// one closes again: it cuts shutdown.delay short, and should writing
	// the state then fail, exits without it.
	ctx, stop, again, release := serving.Signals()
	defer release()
	// A write to standard error after its reader has gone (a log pipe
	// closed) would kill the process with SIGPIPE, in the middle of a
	// request, with the last second's registrations unwritten. Ignored,
	// the write fails instead: the log is lost, not the state.
	signal.Ignore(syscall.SIGPIPE)
	serving.IgnoreHangups() // SIGHUP would kill the process, state unwritten
	cfg, err := LoadConfig(f.config)
	if err != nil {
		return err
	}
	demo := f.config == ""
	if f.addr != "" {
		cfg.Listen = f.addr
	}
	if f.data != "" {
		cfg.DataDir = f.data
	}
	// An unusable data_dir is a configuration error like any other:
	// reported before listening, not once restoring fails. On Redis it
	// is not used.
	if cfg.Storage.Backend != "redis" {
		if err := checkDataDir(cfg.DataDir); err != nil {
			return err
		}
	}
	logger := newLogger(logOut)
	slog.SetDefault(logger)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	cfg.PublicBase(ln.Addr().String())
	if demo {
		// The demo's links point at wherever it actually listens, by a
		// loopback name its store allows as a redirect host.
		base := "http://" + serving.DemoHost(ln.Addr().(*net.TCPAddr))
		cfg.PublicBaseURL = base
		cfg.Stores[0].GameAuthorizeURL = base + "/demo/game/authorize"
	}

	// Until the state is restored, which takes a while for a large store,
	// /healthz answers 200 and everything else 503: probes see "starting".
	// The connection limits are serving.NewServer's timeouts.
	// Requests answered while starting or stopping are counted with the
	// rest: the app's metrics are these.
	m := &serving.Metrics{}
	srv := serving.NewServer(unavailableHandler(logger, m, "starting", "the service is starting (restoring its state); retry shortly"))
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	a, err := awaitApp(ctx, cfg, logger, demo, func() {
		srv.Set(unavailableHandler(logger, m, "starting", "the service is starting and cannot reach its store (Redis) yet; retry shortly"))
	})
	if err != nil {
		srv.Close()
		return err
	}
	if a == nil { // a signal while Redis was awaited: nothing to write
		if err := srv.Stop(unavailableHandler(logger, m, "stopping", "the service is shutting down; retry shortly"), 10*time.Second); err != nil {
			logger.Warn("shutdown: in-flight requests cut off", "err", err)
		}
		logger.Info("shut down before the store answered; bye")
		logOut.Flush()
		return nil
	}
	for _, w := range a.srv.configWarnings() {
		logger.Warn(w)
	}
	// A signal while restoring: never ready, straight to the shutdown.
	if ctx.Err() == nil {
		a.srv.metrics = m
		srv.Set(a.srv.handler())
		a.srv.ready.Store(true)
		where := slog.String("data_dir", cfg.DataDir)
		if cfg.Storage.Backend == "redis" {
			where = slog.String("redis_prefix", cfg.Storage.RedisPrefix) // the URL may hold a password
		}
		logger.Info("serving", "addr", ln.Addr().String(), where, "version", productVersion(), "gomaxprocs", runtime.GOMAXPROCS(0))
		if demo {
			printDemoBanner(cfg, cfg.PublicBaseURL)
		}
	}

	// Serve fails only when the listener does: the stop is then the
	// signal's, requests under way drained and the state written with
	// the same retries, not a Close that left connections open.
	var serveFailed error
	stopping := unavailableHandler(logger, m, "stopping", "the service is shutting down; retry shortly")
	select {
	case serveFailed = <-serveErr:
		logger.Error("serving failed; shutting down", "err", serveFailed)
		stop() // a signal from now on is the second
	case <-ctx.Done():
		// A balancer's health checks see /readyz 503 first, while
		// what it still sends is served (never ready: nothing to wait
		// for).
		if d := cfg.Shutdown.Delay.D(); d > 0 && a.srv.ready.Load() {
			logger.Info("shutting down: /readyz answers 503, requests are served until shutdown.delay has passed", "delay", d.String())
			logOut.Flush()
			srv.Unready(stopping, d, again)
		}
		logger.Info("shutting down")
	}
	a.srv.draining.Store(true) // for the requests under way
	if err := srv.Stop(stopping, 10*time.Second); err != nil {
		logger.Warn("shutdown: in-flight requests cut off", "err", err)
	}
	defer logOut.Flush()
	fix := "make room in data_dir, or make it writable"
	if cfg.Storage.Backend == "redis" {
		fix = "bring Redis back"
	}
	err = a.closeRetrying(func(err error) bool {
		logger.Error("shutdown: cannot write the state; trying again every second until it works ("+fix+"), or signal again to exit without it",
			"err", firstLine(err))
		logOut.Flush()
		select {
		case <-again:
			return false
		case <-time.After(time.Second):
			return true
		}
	})
	if err != nil {
		return errors.Join(serveFailed, fmt.Errorf("writing state (given up on a second signal; what was not written is lost): %s", firstLine(err)))
	}
	if serveFailed != nil {
		return serveFailed
	}
	logger.Info("state written; bye")
	return nil
}

// Waiting for Redis at start: the first retry after startRetryMin, each
// next one twice as late, up to startRetryMax, so that a Redis that is
// back is found within seconds and one down for long is not hammered.
const (
	startRetryMin = 250 * time.Millisecond
	startRetryMax = 5 * time.Second
)

// awaitApp is newApp, tried again while the store (Redis) is unreachable,
// until it answers or ctx ends (a signal: then it returns nil, nil). On
// the first such failure it calls waiting, once. Any other error ends the
// start, as a bad configuration does.
func awaitApp(ctx context.Context, cfg *Config, logger *slog.Logger, demo bool, waiting func()) (*app, error) {
	wait := startRetryMin
	for {
		a, err := newApp(cfg, logger, demo)
		if err == nil || cfg.Storage.Backend != "redis" || !errors.Is(err, store.ErrUnavailable) {
			return a, err
		}
		if wait == startRetryMin {
			waiting()
		}
		logger.Warn("start: cannot reach Redis; answering 503 until it does, and trying again", "in", wait.String(), "err", firstLine(err))
		logOut.Flush()
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
		wait = min(2*wait, startRetryMax)
	}
}

// firstLine is err's message up to its first line break, saying how many
// lines it leaves out: errors.Join puts each error, such as each shard's
// failed write, on a line of its own.
func firstLine(err error) string {
	msg := err.Error()
	first, rest, ok := strings.Cut(msg, "\n")
	if !ok {
		return msg
	}
	return fmt.Sprintf("%s (and %d more)", first, strings.Count(rest, "\n")+1)
}

// unavailableHandler answers while the state is being restored, and
// while the service shuts down, as serving.Unavailable does, why saying
// which. It logs and counts (in m) each request as the service does,
// with route as its route.
func unavailableHandler(logger *slog.Logger, m *serving.Metrics, route, why string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
		w.Header().Set(serving.RequestIDHeader, id)
		rw := &statusWriter{ResponseWriter: w}
		serving.Unavailable(rw, r, why)
		d := time.Since(start)
		m.Observe(r.Method, route, rw.code(), d)
		serving.LogRequest(logger, r, id, serving.LoggedPath(r.URL.Path, "", nil), route, rw.code(), rw.n, start.Add(d), d)
	})
}
