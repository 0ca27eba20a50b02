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
	"io/fs"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "time/tzdata" // timezone checks must work in a static binary without /usr/share/zoneinfo

	"deeplink/internal/serving"
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
	store *memStore
	done  chan struct{} // closed by Close to stop the ticker; nil when not started
	idle  chan struct{} // closed when the ticker has stopped

	lastTick time.Time // of the last timed work, for callers that tick often
}

// newApp restores the state in cfg.DataDir and starts the timed work and
// the webhook dispatcher.
func newApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	a, err := openApp(cfg, logger, demo)
	if err != nil {
		return nil, err
	}
	if err := a.srv.hooks.start(); err != nil {
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

// removeTempFiles removes from dir the temporary files of writeFileWith
// that a crash left behind (NAME.tmpRANDOM, for the state's files: the
// store's snapshots and logs, the webhook state, the cookie key). Each is
// as large as the file it was to replace, and nothing else would remove
// it. It runs before anything writes: only a dead process left these.
func removeTempFiles(dir string, logger *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // restoring reports what is wrong with dir
	}
	for _, e := range entries {
		base, _, ok := strings.Cut(e.Name(), ".tmp")
		if !ok || !e.Type().IsRegular() || !isStateFile(base) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			logger.Warn("data_dir: cannot remove a temporary file a crash left", "file", e.Name(), "err", err)
			continue
		}
		logger.Info("data_dir: removed a temporary file a crash left", "file", e.Name())
	}
}

// holdsState reports whether dir holds any of the state's files.
func holdsState(dir string) bool {
	entries, _ := os.ReadDir(dir)
	return slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return isStateFile(e.Name()) })
}

// isStateFile reports whether name is that of one of the state's files.
func isStateFile(name string) bool {
	switch name {
	case hooksFileName, cookieKeyFile, cleanStopFile:
		return true
	}
	return isStoreFile(name)
}

// openApp restores the state in cfg.DataDir and starts nothing: the wasm
// build, whose goroutines run only while its host calls in, drives the
// timed work from outside.
func openApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if !demo && !holdsState(cfg.DataDir) {
		// Made just now, or empty: a typo in the path or a volume not
		// mounted would start afresh without a word otherwise.
		logger.Warn("data_dir holds no saved state: starting empty (if a state was expected, check the path, and that its volume is mounted)", "data_dir", cfg.DataDir)
	}
	removeTempFiles(cfg.DataDir, logger)
	keyPath := filepath.Join(cfg.DataDir, cookieKeyFile)
	if !exists(keyPath) {
		if hasSnapshot(cfg.DataDir) {
			logger.Error("data_dir holds a state without its cookie key, which is written last when the state is written again after data_dir was removed or emptied: that was cut short, or the key was removed; what is there is restored, anything else is lost", "data_dir", cfg.DataDir)
		}
	} else if missing := missingStoreFiles(cfg.DataDir); len(missing) > 0 {
		// The key is written once every shard has its files (below, and
		// last in a rewrite), and a shard never loses them after: these
		// were removed, and with them entries, used codes among them.
		return nil, fmt.Errorf("restore %s: missing, with %d of the store's %d files, though %s, written once all of them are, is there: restore data_dir from a backup, or move %s away to start without what they held (link sign-ins under way then start over; after an earlier build's first start cut short, that is all it costs)", missing[0], len(missing), 2*numShards, cookieKeyFile, cookieKeyFile)
	}
	st, err := newMemStore(cfg.DataDir, cfg.MaxLiveEntries)
	if err != nil {
		return nil, err
	}
	// After the store, whose start writes every shard's files: so that
	// the key's being there says they were all written.
	key, err := loadOrCreateKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	srv := newServer(cfg, st, st.Len, key, logger)
	srv.liveCodes = &costlyGauge{
		compute: func() int { return st.Count(func(v []byte) bool { return len(v) > 0 && v[0] == kindCode }) },
		size:    st.Len,
	}
	srv.demo = demo
	if err := srv.hooks.load(cfg.DataDir); err != nil {
		return nil, err
	}
	return &app{srv: srv, store: st}, nil
}

// tick does the timed work: sweeps, writing what changed, webhook
// housekeeping. One caller at a time.
func (a *app) tick(now time.Time) {
	a.lastTick = now
	defer logOut.Flush()
	a.ensureDataDir()
	a.srv.keys.sweep(now)
	a.store.Tick(now)
	a.srv.hooks.tick(now, a.srv.cfg.DataDir) // a failure is logged by the save, and retried at the next tick
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

// writeState writes what changed in the store and the webhook state, and
// the whole state when data_dir has gone (ensureDataDir). After a failure
// it can be called again: what failed is still pending, and the store
// then writes every shard whole.
func (a *app) writeState() error {
	// From here registrations and webhook changes answer 503: a request
	// the stop cut off would otherwise be answered for a change no write
	// takes up.
	a.store.BeginStop()
	_, err := a.ensureDataDir()
	if err = errors.Join(err, a.store.Flush(), a.srv.hooks.save(a.srv.cfg.DataDir)); err != nil {
		return err
	}
	// Last: the next start holds the store's logs to what it records,
	// and refuses to start without the webhook state if there was one,
	// unless a write after it (a redemption the stop cut off) removed it.
	return a.store.MarkCleanStop(hooksFileName)
}

// closeRetrying is Close, but while writing the state fails (a full disk,
// a data_dir made read-only) it calls again with the error, and writes
// again when again reports true; it returns the last write's error, nil
// once one worked. Everything the service acknowledged is in memory until
// written, so giving up loses it: run gives up only on a second signal.
func (a *app) closeRetrying(again func(error) bool) error {
	err := a.Close()
	for err != nil && again(err) {
		err = a.writeState()
	}
	return err
}

// ensureDataDir puts data_dir back when it has disappeared or been
// emptied under the running service (by hand, or by a cleanup job), which
// the cookie key's absence tells. It recreates the directory and writes
// the whole state there again, the cookie key last: the key marks a
// data_dir whose state is whole, so a rewrite cut short (a crash, the
// edge build's call deadline) leaves none, which the next start reports
// (openApp) and the next call here takes up again. Otherwise every write
// would fail until a restart, and the restart would find nothing. It
// reports whether it found data_dir gone, and whether the state is back.
func (a *app) ensureDataDir() (gone bool, err error) {
	dir := a.srv.cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, cookieKeyFile)); !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	a.srv.log.Warn("data_dir has disappeared or been emptied; recreating it and writing the whole state", "data_dir", dir)
	// What removes data_dir may still be at it (a recursive removal
	// takes the files, then the directory): a rewrite that finds the
	// directory gone again starts over, a few times.
	for try := 1; ; try++ {
		if err = os.MkdirAll(dir, 0o700); err != nil {
			a.srv.log.Error("data_dir: cannot recreate it", "err", err)
			return true, err
		}
		a.store.rewriteAll()
		a.srv.hooks.markDirty()
		var p pacer // the whole store: in pieces, as the ticker writes, so requests go on
		err = errors.Join(a.store.flush(allShards, false, true, &p), a.srv.hooks.save(dir))
		if missing := missingStoreFiles(dir); err == nil && len(missing) > 0 {
			// Taken while the others were written: the key, which says
			// every shard's files are there, must wait for them.
			err = fmt.Errorf("%s: %w", missing[0], fs.ErrNotExist)
		}
		if err == nil {
			err = writeFileAtomic(filepath.Join(dir, cookieKeyFile), a.srv.cookieKey)
		}
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try == 3 {
			break
		}
	}
	if err != nil {
		a.srv.log.Error("data_dir: cannot write the state again", "err", err)
	}
	return true, err
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
