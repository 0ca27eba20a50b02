package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/webhook"
)

// app is the service without its listener: what run serves and what tests
// start, stop and start again on one data_dir (or one Redis).
type app struct {
	srv   *server
	store appStore
	db    *embedded.DB  // store, when it is the embedded one; nil on Redis
	done  chan struct{} // closed by Close to stop the ticker; nil when not started
	idle  chan struct{} // closed when the ticker has stopped

	lastTick time.Time // of the last timed work, for callers that tick often
}

// state is the store openState opened, with what it can tell of itself.
type state struct {
	store  appStore
	db     *embedded.DB // store, when it is the embedded one in this process
	dir    string       // where an earlier build's files may be; "" where none can be
	remote bool         // a store of its own (Redis): reads need it too
	live   func() int   // live entries, when the store counts them cheaply; else nil
	codes  func() int   // live auth codes, likewise
}

// appStore is what the app needs of its store beyond the contract.
type appStore interface {
	store.Store
	// Failing reports why the store cannot take changes now, or nil. It
	// is asked on every webhook change and /readyz, so it answers from
	// what the store already knows, without a round trip.
	Failing() error
}

// newApp restores the state (in cfg.DataDir, or in Redis) and starts the
// timed work and the webhook sender. With Redis unreachable it fails
// with an error wrapping store.ErrUnavailable, and run tries again.
func newApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	return newAppAt(cfg, logger, demo, time.Now)
}

// newAppAt is newApp with now as the clock of expiries (tests move it).
func newAppAt(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*app, error) {
	a, err := openAppAt(cfg, logger, demo, now)
	if err != nil {
		return nil, err
	}
	if err := a.srv.hooks.Start(); err != nil {
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

// removeTempFiles removes from dir the temporary files (NAME.tmpRANDOM,
// of the webhook state and the cookie key) that an earlier build's
// atomic writes left when a crash cut them short. It runs before
// anything writes: only a dead process left these.
func removeTempFiles(dir string, logger *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // restoring reports what is wrong with dir
	}
	for _, e := range entries {
		base, _, ok := strings.Cut(e.Name(), ".tmp")
		if !ok || !e.Type().IsRegular() || base != webhook.HooksFileName && base != cookieKeyFile {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			logger.Warn("data_dir: cannot remove a temporary file a crash left", "file", e.Name(), "err", err)
		}
	}
}

// openApp restores the state and starts nothing: the wasm build, whose
// goroutines run only while its host calls in, drives the timed work from
// outside.
func openApp(cfg *Config, logger *slog.Logger, demo bool) (*app, error) {
	return openAppAt(cfg, logger, demo, time.Now)
}

// openAppAt is openApp with now as the clock of expiries.
func openAppAt(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*app, error) {
	st, err := openState(cfg, logger, demo, now)
	if err != nil {
		return nil, err
	}
	a := &app{store: st.store, db: st.db}
	dir := st.dir
	ctx := context.Background()
	key, err := cookieKey(ctx, a.store, dir)
	if err != nil {
		a.store.Close()
		if dir != "" {
			err = fmt.Errorf("data_dir: %w", err)
		}
		return nil, err
	}
	srv := newServer(cfg, a.store, key, logger)
	srv.now = now
	srv.hooks.Now = now
	srv.storeFailing = a.store.Failing
	srv.remote = st.remote
	srv.live = st.live
	if st.codes != nil {
		srv.liveCodes = &costlyGauge{compute: st.codes, size: st.live}
	}
	srv.demo = demo
	srv.hooks.St = a.store
	if st.db != nil { // the embedded store of this process
		srv.hooks.Alone, srv.hooks.SendSt = true, st.db.NoWait()
	}
	if dir != "" {
		if err := srv.hooks.ImportHooksFile(ctx, dir, filepath.Join(dir, legacyMovedDir)); err != nil {
			a.store.Close()
			return nil, err
		}
	}
	if err := srv.hooks.Open(ctx); err != nil {
		a.store.Close()
		return nil, err
	}
	if srv.seedWarnings, err = srv.seedSettings(ctx, demo); err != nil {
		a.store.Close()
		return nil, err
	}
	a.srv = srv
	return a, nil
}

// tick does the timed work: the API-key and redemption guards' sweeps, webhook
// housekeeping. One caller at a time.
func (a *app) tick(now time.Time) {
	a.lastTick = now
	defer logOut.Flush()
	a.srv.keys.sweep(now)
	a.srv.grants.sweep(now)
	a.srv.tallies.sweep(context.Background(), now)
	if err := a.srv.hooks.Tick(now); err != nil {
		a.srv.log.Error("webhooks: writing the state failed; trying again at the next tick", "err", err)
	}
}

// Close stops the timed work and the webhook sender and writes the
// state. Requests must have finished.
func (a *app) Close() error {
	if a.done != nil {
		close(a.done)
		<-a.idle
	}
	a.srv.hooks.Stop()
	return a.writeState()
}

// writeState closes the store, which makes every change durable. After
// a failure it can be called again.
func (a *app) writeState() error {
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

// cookieKeyFile is where builds before the store contract kept the key
// that signs the link cookie; cookieKey takes it into the store once.
const cookieKeyFile = "cookie.key"

// cookieKeyName is the store key of the link cookie's signing key.
const cookieKeyName = "config:cookie-key"

// cookieKey returns the 32-byte key that signs the link cookie, kept in
// st, so that every replica on one store shares it: made on first use,
// or taken from an earlier build's dir/cookie.key (then moved to
// dir/earlier-build/). dir is data_dir, or "" where no earlier build
// kept files (Redis).
func cookieKey(ctx context.Context, st store.Store, dir string) ([]byte, error) {
	b, err := st.Get(ctx, cookieKeyName)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("the link cookie's key: want 32 bytes, found %d", len(b))
		}
		return b, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	path := filepath.Join(dir, cookieKeyFile)
	b, err = os.ReadFile(path)
	if dir == "" {
		err = os.ErrNotExist
	}
	switch {
	case err == nil && len(b) != 32:
		return nil, fmt.Errorf("%s: want 32 bytes, found %d", path, len(b))
	case errors.Is(err, os.ErrNotExist):
		b = make([]byte, 32)
		rand.Read(b)
	case err != nil:
		return nil, err
	}
	switch err := st.Insert(ctx, cookieKeyName, b, time.Time{}); {
	case errors.Is(err, store.ErrExists): // another replica made it meanwhile
		return cookieKey(ctx, st, dir)
	case err != nil:
		return nil, err
	}
	if dir != "" && exists(path) {
		moved := filepath.Join(dir, legacyMovedDir)
		if err := os.MkdirAll(moved, 0o700); err != nil {
			return nil, err
		}
		if err := os.Rename(path, filepath.Join(moved, cookieKeyFile)); err != nil {
			return nil, err
		}
	}
	return b, nil
}
