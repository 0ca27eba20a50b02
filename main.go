// Command deeplink signs players into a webshop from the game app through
// a deep link with PKCE, and tells merchants' servers about store events
// with signed webhooks. See README.md and API.md.
package main

import (
	"context"
	"crypto/rand"
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
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	_ "time/tzdata" // timezone checks must work in a static binary without /usr/share/zoneinfo

	"deeplink/internal/serving"
	"deeplink/internal/store/embedded"
)

var (
	configFile = flag.String("config", "", "configuration file (API.md §2); empty serves the embedded demo")
	addrFlag   = flag.String("addr", "", "listen address HOST:PORT, overriding the configuration's listen")
	dataFlag   = flag.String("data", "", "state directory, overriding the configuration's data_dir")
)

// version is set at link time with -ldflags "-X main.version=…"; otherwise
// it comes from the module's build information.
var version = ""

func main() {
	log.SetFlags(0)
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "version":
			fmt.Println(productVersion())
			return
		case "verify":
			os.Exit(runVerify(os.Args[2:], os.Stdin, os.Stdout))
		}
	}
	flag.Parse()
	if flag.NArg() > 0 {
		// Not the server's: a subcommand goes first (deeplink verify …),
		// and a misspelt one must not start the service instead.
		fmt.Fprintf(os.Stderr, "unexpected argument %q: the subcommands (version, verify) come first, before any flag\n", flag.Arg(0))
		os.Exit(2)
	}
	if err := run(); err != nil {
		// The default logger writes to the log buffer: flush it, and print
		// the error itself where it cannot be lost.
		logOut.Flush()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func productVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "0.1.0+" + s.Value[:12]
			}
		}
	}
	return "0.1.0-dev"
}

func run() error {
	// Signals are caught from the start: a SIGTERM while the state is
	// restored (a while, for a large store, with /healthz already up)
	// ends the start-up as it would end serving, state written, exit 0.
	// The first ends ctx; a second, should writing the state then fail,
	// exits without it. One channel takes both from the start, so that
	// no second signal is lost, however soon after the first it comes.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-sigs:
			stop()
		case <-ctx.Done():
		}
	}()
	// A write to standard error after its reader has gone (a log pipe
	// closed) would kill the process with SIGPIPE, in the middle of a
	// request, with the last second's registrations unwritten. Ignored,
	// the write fails instead: the log is lost, not the state.
	signal.Ignore(syscall.SIGPIPE)
	serving.IgnoreHangups() // SIGHUP would kill the process, state unwritten
	cfg, err := LoadConfig(*configFile)
	if err != nil {
		return err
	}
	demo := *configFile == ""
	if *addrFlag != "" {
		cfg.Listen = *addrFlag
	}
	if *dataFlag != "" {
		cfg.DataDir = *dataFlag
	}
	// An unusable data_dir is a configuration error like any other:
	// reported before listening (API.md §1), not once restoring fails.
	if err := checkDataDir(cfg.DataDir); err != nil {
		return err
	}
	logger := newLogger(logOut)
	slog.SetDefault(logger)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
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
	m := newMetrics()
	srv := serving.NewServer(unavailableHandler(logger, m, "starting", "the service is starting (restoring its state); retry shortly"))
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	a, err := newApp(cfg, logger, demo)
	if err != nil {
		srv.Close()
		return err
	}
	for _, w := range a.srv.configWarnings() {
		logger.Warn(w)
	}
	// A signal while restoring: never ready, straight to the shutdown.
	if ctx.Err() == nil {
		a.srv.metrics = m
		srv.Set(a.srv.handler())
		a.srv.ready.Store(true)
		logger.Info("serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir, "version", productVersion(), "gomaxprocs", runtime.GOMAXPROCS(0))
		if demo {
			printDemoBanner(cfg, cfg.PublicBaseURL)
		}
	}

	// Serve fails only when the listener does: the stop is then the
	// signal's, requests under way drained and the state written with
	// the same retries, not a Close that left connections open.
	var serveFailed error
	select {
	case serveFailed = <-serveErr:
		logger.Error("serving failed; shutting down", "err", serveFailed)
	case <-ctx.Done():
		logger.Info("shutting down")
	}
	a.srv.draining.Store(true) // for the requests under way
	if err := srv.Stop(unavailableHandler(logger, m, "stopping", "the service is shutting down; retry shortly"), 10*time.Second); err != nil {
		logger.Warn("shutdown: in-flight requests cut off", "err", err)
	}
	defer logOut.Flush()
	err = a.closeRetrying(func(err error) bool {
		logger.Error("shutdown: cannot write the state; trying again every second until it works (make room in data_dir, or make it writable), or signal again to exit without it",
			"err", firstLine(err))
		logOut.Flush()
		select {
		case <-sigs: // the second
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
func unavailableHandler(logger *slog.Logger, m *metrics, route, why string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
		w.Header().Set(serving.RequestIDHeader, id)
		rw := &statusWriter{ResponseWriter: w}
		serving.Unavailable(rw, r, why)
		d := time.Since(start)
		m.observe(route, rw.code(), d)
		serving.LogRequest(logger, r, id, route, rw.code(), rw.n, start.Add(d), d)
	})
}

// app is the service without its listener: what run serves and what tests
// start, stop and start again on one data_dir.
type app struct {
	srv   *server
	store *embedded.DB
	done  chan struct{} // closed by Close to stop the ticker; nil when not started
	idle  chan struct{} // closed when the ticker has stopped

	lastTick time.Time // of the last timed work, for callers that tick often
}

// newApp restores the state in cfg.DataDir and starts the timed work and
// the webhook dispatcher.
func newApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	return newAppAt(cfg, logger, demo, time.Now)
}

// newAppAt is newApp with now as the clock of expiries (tests move it).
func newAppAt(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*app, error) {
	a, err := openAppAt(cfg, logger, demo, now)
	if err != nil {
		return nil, err
	}
	if err := a.srv.hooks.start(); err != nil {
		a.store.Close()
		return nil, err
	}
	a.done, a.idle = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.idle)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-a.done:
				return
			case now := <-t.C:
				a.tick(now)
			}
		}
	}()
	return a, nil
}

// checkDataDir makes dir if it is missing and checks that files can be
// made in it, as the state's are.
func checkDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	return nil
}

// removeTempFiles removes from dir the temporary files of writeFileAtomic
// that a crash left behind (NAME.tmpRANDOM, for the webhook state and the
// cookie key). It runs before anything writes: only a dead process left
// these.
func removeTempFiles(dir string, logger *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // restoring reports what is wrong with dir
	}
	for _, e := range entries {
		base, _, ok := strings.Cut(e.Name(), ".tmp")
		if !ok || !e.Type().IsRegular() || base != hooksFileName && base != cookieKeyFile {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			logger.Warn("data_dir: cannot remove a temporary file a crash left", "file", e.Name(), "err", err)
		}
	}
}

// openApp restores the state in cfg.DataDir and starts nothing: the wasm
// build, whose goroutines run only while its host calls in, drives the
// timed work from outside.
func openApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	return openAppAt(cfg, logger, demo, time.Now)
}

// openAppAt is openApp with now as the clock of expiries.
func openAppAt(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*app, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if entries, _ := os.ReadDir(cfg.DataDir); !demo && len(entries) == 0 {
		// Made just now, or empty: a typo in the path or a volume not
		// mounted would start afresh without a word otherwise.
		logger.Warn("data_dir holds no saved state: starting empty (if a state was expected, check the path, and that its volume is mounted)", "data_dir", cfg.DataDir)
	}
	removeTempFiles(cfg.DataDir, logger)
	if err := importEarlierBuild(cfg.DataDir, logger); err != nil {
		return nil, err
	}
	st, err := embedded.Open(cfg.DataDir, embedded.Options{
		Durability: embedded.Durability(cfg.Storage.Durability),
		MaxLive:    cfg.MaxLiveEntries,
		Logger:     logger,
		Now:        now,
	})
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	key, err := loadOrCreateKey(filepath.Join(cfg.DataDir, cookieKeyFile))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	srv := newServer(cfg, st, key, logger)
	srv.now = now
	srv.live = st.Len
	srv.storeFailing = st.Failing
	srv.liveCodes = &costlyGauge{
		compute: func() int { return st.Count(keyPrefix, func(v []byte) bool { return len(v) > 0 && v[0] == kindCode }) },
		size:    st.Len,
	}
	srv.demo = demo
	srv.hooks.st = st
	ctx := context.Background()
	if err := errors.Join(srv.hooks.importHooksFile(ctx, cfg.DataDir), srv.hooks.loadStore(ctx)); err != nil {
		st.Close()
		return nil, err
	}
	return &app{srv: srv, store: st}, nil
}

// importEarlierBuild reads an earlier build's files in dir, if there are
// any, into the store once (importLegacy), with every entry on disk
// before those files are moved away.
func importEarlierBuild(dir string, logger *slog.Logger) error {
	if !exists(filepath.Join(dir, legacyPrefix+"00.snap")) && !exists(filepath.Join(dir, legacyPrefix+"00.log")) {
		return nil
	}
	st, err := embedded.Open(dir, embedded.Options{Durability: embedded.Fsync, Logger: logger})
	if err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	err = importLegacy(dir, st, time.Now(), logger)
	return errors.Join(err, st.Close())
}

// tick does the timed work: the API-key guard's sweep, webhook
// housekeeping. One caller at a time.
func (a *app) tick(now time.Time) {
	a.lastTick = now
	defer logOut.Flush()
	a.srv.keys.sweep(now)
	if err := a.srv.hooks.tick(now); err != nil {
		a.srv.log.Error("webhooks: writing the state failed; trying again at the next tick", "err", err)
	}
}

// Close stops the timed work and the webhook dispatcher and writes the
// state. Requests must have finished.
func (a *app) Close() error {
	if a.done != nil {
		close(a.done)
		<-a.idle
	}
	a.srv.hooks.stop()
	return a.writeState()
}

// writeState writes what the webhook dispatcher changed last and closes
// the store. After a failure it can be called again.
func (a *app) writeState() error {
	if err := a.srv.hooks.persist(context.Background()); err != nil {
		return err
	}
	return a.store.Close()
}

// closeRetrying is Close, but while writing the state fails (a full disk,
// a data_dir made read-only) it calls again with the error, and writes
// again when again reports true; it returns the last write's error, nil
// once one worked. It gives up only when again says so.
func (a *app) closeRetrying(again func(error) bool) error {
	err := a.Close()
	for err != nil && again(err) {
		err = a.writeState()
	}
	return err
}

// cookieKeyFile is the file in data_dir holding the key that signs the
// link cookie.
const cookieKeyFile = "cookie.key"

// loadOrCreateKey returns the 32-byte key in path, creating it on first use.
func loadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("%s: want 32 bytes, found %d", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	rand.Read(b)
	return b, writeFileAtomic(path, b)
}

// printDemoBanner prints the demo store's id and key, and curl lines
// against the service at base.
func printDemoBanner(cfg *Config, base string) {
	st := cfg.Stores[0]
	fmt.Printf(`
Demo configuration (for trying it out; never deploy it).
  store id: %s
  API key:  %s
  open %s/ in a browser and click "Link to game".

Register an auth code as a game app would:
  curl -i %s/stores/%s/auth/auth-code \
    -H 'X-API-Key: %s' -H 'Content-Type: application/json' \
    -d '{"auth_code":"demo-code-0123456789abcdef","redirect_uri":"%s/stores/%s/auth/callback","client_reference_id":"player-42","code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"xyz"}'

Exchange it as the webshop would, with the verifier whose S256 hash is that challenge:
  curl -i %s/stores/%s/auth/token -d grant_type=authorization_code \
    -d code=demo-code-0123456789abcdef -d code_verifier=dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY \
    --data-urlencode redirect_uri=%s/stores/%s/auth/callback

Open the link URL that starts the deep-link flow:
  curl -i '%s/stores/%s/auth/link?return_to=/'

`, st.ID, st.APIKeys[0], base, base, st.ID, st.APIKeys[0], base, st.ID, base, st.ID, base, st.ID, base, st.ID)
}
