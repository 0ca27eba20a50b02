//go:build !wasip1

package main

import (
	"log/slog"
	"time"

	"deeplink/internal/store/redisstore"
)

// openRedis opens the store on cfg's Redis, its health watched
// (redisstore.Watched): Failing is right from the start. A Redis that
// does not answer is no error here (the calls then fail with
// ErrUnavailable).
func openRedis(cfg *Config, logger *slog.Logger, now func() time.Time) (appStore, error) {
	w, err := redisstore.OpenWatched(redisstore.Options{
		URL:    cfg.Storage.RedisURL,
		Prefix: cfg.Storage.RedisPrefix,
		Now:    now,
		Logger: logger,
	})
	if err != nil {
		return nil, err // config.Parse checked the URL: not reached
	}
	return w, nil
}
