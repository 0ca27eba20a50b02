//go:build !wasip1

package redisstore

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The cached health of Redis (Watched.Failing): a PING every
// pingInterval, each given pingTimeout. /readyz and the webhook changes
// see Redis go within pingInterval + pingTimeout, and come back within
// pingInterval; requests that reach Redis find out at once either way.
const (
	pingInterval = 500 * time.Millisecond
	pingTimeout  = time.Second
)

// Watched is a Store whose Failing is the last PING's outcome, kept by a
// goroutine of its own, not a round trip per call: for callers that ask
// on every request (/readyz, the webhook changes).
type Watched struct {
	*Store
	log     *slog.Logger
	failing atomic.Pointer[error] // the last PING's error; nil: it answered
	stop    chan struct{}         // closed by Close
	done    chan struct{}         // closed when the pinging has stopped
	once    sync.Once             // of Close's stopping
}

// OpenWatched opens the store on o's Redis, and has pinged it once before
// it returns: Failing is right from the start. A Redis that does not
// answer is no error here (the calls then fail with ErrUnavailable).
func OpenWatched(o Options) (*Watched, error) {
	st, err := Open(o)
	if err != nil {
		return nil, err
	}
	w := &Watched{Store: st, log: cmp.Or(o.Logger, slog.Default()), stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.check(); err != nil {
		w.failing.Store(&err) // not logged: the caller's start says it waits for Redis
	}
	go w.watch()
	return w, nil
}

// ping asks Redis, keeps the outcome for Failing, and logs a change of
// it: one line when Redis stops answering, one when it is back.
func (w *Watched) ping() {
	err := w.check()
	var was error
	if err != nil {
		if p := w.failing.Swap(&err); p != nil {
			was = *p
		}
	} else if p := w.failing.Swap(nil); p != nil {
		was = *p
	}
	switch {
	case err != nil && was == nil:
		w.log.Error("redis does not answer: requests that need state answer 503, /readyz 503, until it does", "err", err)
	case err == nil && was != nil:
		w.log.Info("redis answers again: serving")
	}
}

// check is one PING within pingTimeout.
func (w *Watched) check() error {
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	return w.Store.Ping(ctx)
}

func (w *Watched) watch() {
	defer close(w.done)
	t := time.NewTicker(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.ping()
		}
	}
}

// Failing is the last PING's error: nil while Redis answers.
func (w *Watched) Failing() error {
	if p := w.failing.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops the pinging and closes the store.
func (w *Watched) Close() error {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
	return w.Store.Close()
}
