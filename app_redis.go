//go:build !wasip1

package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/store/redisstore"
)

// The cached health of Redis (redisState.Failing): a PING every
// pingInterval, each given pingTimeout. /readyz and the webhook changes
// see Redis go within pingInterval + pingTimeout, and come back within
// pingInterval; requests that reach Redis find out at once either way.
const (
	pingInterval = 500 * time.Millisecond
	pingTimeout  = time.Second
)

// redisState is the Redis store as the app uses it: its Failing is the
// last PING's outcome, kept by a goroutine of its own, not a round trip
// per call.
type redisState struct {
	*redisstore.Store
	log     *slog.Logger
	failing atomic.Pointer[error] // the last PING's error; nil: it answered
	stop    chan struct{}         // closed by Close
	done    chan struct{}         // closed when the pinging has stopped
	once    sync.Once             // of Close's stopping
}

// openRedis opens the store on cfg's Redis, and has pinged it once
// before it returns: Failing is right from the start. A Redis that does
// not answer is no error here (the calls then fail with ErrUnavailable).
func openRedis(cfg *Config, logger *slog.Logger, now func() time.Time) (appStore, error) {
	st, err := redisstore.Open(redisstore.Options{
		URL:    cfg.Storage.RedisURL,
		Prefix: cfg.Storage.RedisPrefix,
		Now:    now,
		Logger: logger,
	})
	if err != nil {
		return nil, err // config.Parse checked the URL: not reached
	}
	r := &redisState{Store: st, log: logger, stop: make(chan struct{}), done: make(chan struct{})}
	if err := r.check(); err != nil {
		r.failing.Store(&err) // not logged: the start says it waits for Redis
	}
	go r.watch()
	return r, nil
}

// ping asks Redis, keeps the outcome for Failing, and logs a change of
// it: one line when Redis stops answering, one when it is back.
func (r *redisState) ping() {
	err := r.check()
	var was error
	if err != nil {
		if p := r.failing.Swap(&err); p != nil {
			was = *p
		}
	} else if p := r.failing.Swap(nil); p != nil {
		was = *p
	}
	switch {
	case err != nil && was == nil:
		r.log.Error("redis does not answer: requests that need state answer 503, /readyz 503, until it does", "err", err)
	case err == nil && was != nil:
		r.log.Info("redis answers again: serving")
	}
}

// check is one PING within pingTimeout.
func (r *redisState) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	return r.Store.Ping(ctx)
}

func (r *redisState) watch() {
	defer close(r.done)
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.ping()
		}
	}
}

// Failing is the last PING's error: nil while Redis answers.
func (r *redisState) Failing() error {
	if p := r.failing.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the pinging and closes the store.
func (r *redisState) Close() error {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
	})
	return r.Store.Close()
}
