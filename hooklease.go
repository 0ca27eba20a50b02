package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The delivery lease of a shared webhook state (hookshare.go): the one
// replica at a time that sends the deliveries.

// lead renews the lease this replica holds, or takes it when free; a
// replica that cannot renew stops sending before it runs out. One caller
// at a time (tick).
func (hk *hooks) lead(ctx context.Context, now time.Time) {
	sh := hk.share
	lease := hk.leaseTTL()
	name := []byte(sh.name)
	hk.mu.Lock()
	leading := hk.leading
	hk.mu.Unlock()
	if leading {
		err := sh.st.CompareAndSwap(ctx, shareLead, name, name, now.Add(lease))
		switch {
		case err == nil:
			sh.leaseEnd = now.Add(lease)
			hk.mu.Lock()
			hk.sendUntil = sh.leaseEnd.Add(-leaseMargin)
			if hk.d != nil {
				hk.d.cond.Broadcast() // workers that waited past the old margin
			}
			hk.mu.Unlock()
		case errors.Is(err, store.ErrConflict) || now.After(sh.leaseEnd.Add(-leaseMargin)):
			hk.log.Warn("webhooks: no longer sending deliveries: another replica does", "lost", err)
			hk.stepDown(ctx, true)
		}
		return
	}
	err := sh.st.Insert(ctx, shareLead, name, now.Add(lease))
	if errors.Is(err, store.ErrExists) {
		// Perhaps still this replica's: it stops sending when it reads
		// the whole state again.
		err = sh.st.CompareAndSwap(ctx, shareLead, name, name, now.Add(lease))
	}
	if err != nil {
		return // held by another, or the store unreachable
	}
	sh.leaseEnd = now.Add(lease)
	// Caught up before it sends, under the lock: it sends what the last
	// leader left, and applies what the others changed meanwhile.
	err = hk.locked(ctx, func() {
		hk.mu.Lock()
		defer hk.mu.Unlock()
		hk.leading, hk.sendUntil = true, sh.leaseEnd.Add(-leaseMargin)
		hk.term++
		hk.pokeLocked()
	})
	if err != nil {
		hk.log.Warn("webhooks: cannot start sending deliveries", "err", err)
		hk.stepDown(ctx, true)
		sh.st.CompareAndSwap(ctx, shareLead, name, nil, time.Time{})
		return
	}
	hk.log.Info("webhooks: this replica now sends the deliveries")
}

// leaseTTL is how long the lead lasts unless renewed.
func (hk *hooks) leaseTTL() time.Duration {
	return max(leaseMin, hk.cfg.Webhooks.Timeout.D()+leaseExtra)
}

// sendingLocked reports whether this replica sends deliveries at now:
// always when nothing is shared; while it holds the lease, leaseMargin
// short of its end, when shared. hk.mu must be held.
func (hk *hooks) sendingLocked(now time.Time) bool {
	return hk.leading && (hk.share == nil || now.Before(hk.sendUntil))
}

// stepDown stops sending. A leader that gives the lease up (a stop)
// first writes what it has not (the outcomes of its last attempts); one
// that lost it (lost), or may have, writes nothing more of deliveries:
// the next leader owns them, and may have changed them since.
func (hk *hooks) stepDown(ctx context.Context, lost bool) {
	if !lost {
		hk.sync(ctx)
	}
	hk.persistMu.Lock()
	hk.mu.Lock()
	hk.stepDownLocked()
	hk.mu.Unlock()
	hk.persistMu.Unlock()
}

// stepDownLocked stops sending: what is ready or waiting goes back to the
// schedule, and attempts under way are cancelled and their outcomes
// dropped (finishLocked: of another term): they stay pending, for the
// next leader. What the leader changed of deliveries and events the
// store has, and did not write, is left to the next leader, the one
// writer of those (deliveries made by requests meanwhile are written,
// by their own); and since it took none of the others' changes of those
// in while it led, the copy is read again at its next catch-up.
// hk.persistMu and hk.mu must be held.
func (hk *hooks) stepDownLocked() {
	if hk.share == nil || !hk.leading {
		return
	}
	hk.leading = false
	hk.term++
	hk.share.behind = true
	now := time.Now().UnixNano()
	for _, d := range hk.ready {
		if e := hk.endpoints[d.EndpointID]; e != nil {
			e.inflight--
		}
		d.NextAt = now
		hk.scheduleLocked(d)
	}
	hk.ready = nil
	for _, e := range hk.endpoints {
		for _, d := range e.waiting {
			d.NextAt = now
			hk.scheduleLocked(d)
		}
		e.waiting = nil
		if e.cancelAttempts != nil {
			e.cancelAttempts()
			e.attempts, e.cancelAttempts = nil, nil
		}
	}
	for k := range hk.touched {
		if hk.indexed[k] && (strings.HasPrefix(k, kindDelivery+":") || strings.HasPrefix(k, kindEvent+":")) {
			delete(hk.touched, k)
		}
	}
}

// release gives the lead up, if this replica holds it, so that another
// takes it at its next tick rather than when it runs out: for a stop.
func (hk *hooks) release(ctx context.Context) {
	if hk.share == nil {
		return
	}
	hk.mu.Lock()
	leading := hk.leading
	hk.mu.Unlock()
	if !leading {
		return
	}
	hk.stepDown(ctx, false)
	name := []byte(hk.share.name)
	hk.share.st.CompareAndSwap(ctx, shareLead, name, nil, time.Time{})
}

// fresh catches the copy up, reading it again whole under the lock when
// the feed cannot tell (catchUp): for a read, and a follower's tick.
func (hk *hooks) fresh(ctx context.Context) error {
	err := hk.catchUp(ctx, false)
	if errors.Is(err, errBehind) {
		err = hk.locked(ctx, func() {})
	}
	return err
}
