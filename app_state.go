//go:build !wasip1

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"deeplink/internal/store/embedded"
)

// openState opens the store cfg names: the embedded one in data_dir
// (after taking in what an earlier build left there), or Redis.
func openState(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*state, error) {
	if cfg.Storage.Backend == "redis" {
		st, err := openRedis(cfg, logger, now)
		// Redis has no cheap count of a prefix's keys: a scan of them
		// all at each scrape would cost Redis as much as the requests.
		// Redis's own INFO keyspace (redis_exporter) counts them.
		return &state{store: st, remote: true}, err
	}
	db, err := openEmbedded(cfg, logger, demo, now)
	if err != nil {
		return nil, err
	}
	return &state{store: db, db: db, dir: cfg.DataDir, live: db.Len,
		codes: func() int { return db.Count(keyPrefix, func(v []byte) bool { return len(v) > 0 && v[0] == kindCode }) }}, nil
}

// openEmbedded opens the embedded store in cfg.DataDir, after taking in
// what an earlier build left there.
func openEmbedded(cfg *Config, logger *slog.Logger, demo bool, now func() time.Time) (*embedded.DB, error) {
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
	db, err := embedded.Open(cfg.DataDir, embedded.Options{
		Durability: embedded.Durability(cfg.Storage.Durability),
		MaxLive:    cfg.MaxLiveEntries,
		Logger:     logger,
		Now:        now,
	})
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	return db, nil
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
