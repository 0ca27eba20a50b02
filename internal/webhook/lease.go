package webhook

import (
	"context"
	"errors"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The delivery lease of a shared webhook state (share.go): the one
// replica at a time that sends the deliveries.

// lead renews the lease this replica holds, or takes it when free; a
// replica that cannot renew stops sending before it runs out. One caller
// at a time (tick).
func (hk *Hooks) Lead(ctx context.Context, now time.Time) {
	sh := hk.Share
	lease := hk.LeaseTTL()
	name := []byte(sh.name)
	hk.Mu.Lock()
	leading := hk.Leading
	hk.Mu.Unlock()
	if leading {
		err := sh.st.CompareAndSwap(ctx, ShareLead, name, name, now.Add(lease))
		switch {
		case err == nil:
			sh.leaseEnd = now.Add(lease)
			hk.Mu.Lock()
			hk.SendUntil = sh.leaseEnd.Add(-leaseMargin)
			if hk.d != nil {
				hk.d.cond.Broadcast() // workers that waited past the old margin
			}
			hk.Mu.Unlock()
		case errors.Is(err, store.ErrConflict) || now.After(sh.leaseEnd.Add(-leaseMargin)):
			hk.Log.Warn("webhooks: no longer sending deliveries: another replica does", "lost", err)
			hk.stepDown(ctx, true)
		}
		return
	}
	err := sh.st.Insert(ctx, ShareLead, name, now.Add(lease))
	if errors.Is(err, store.ErrExists) {
		// Perhaps still this replica's: it stops sending when it reads
		// the whole state again.
		err = sh.st.CompareAndSwap(ctx, ShareLead, name, name, now.Add(lease))
	}
	if err != nil {
		return // held by another, or the store unreachable
	}
	sh.leaseEnd = now.Add(lease)
	// Caught up before it sends, under the lock: it sends what the last
	// leader left, and applies what the others changed meanwhile.
	err = hk.Locked(ctx, func() {
		hk.Mu.Lock()
		defer hk.Mu.Unlock()
		hk.Leading, hk.SendUntil = true, sh.leaseEnd.Add(-leaseMargin)
		hk.term++
		hk.Poke()
	})
	if err != nil {
		hk.Log.Warn("webhooks: cannot start sending deliveries", "err", err)
		hk.stepDown(ctx, true)
		sh.st.CompareAndSwap(ctx, ShareLead, name, nil, time.Time{})
		return
	}
	hk.Log.Info("webhooks: this replica now sends the deliveries")
}

// leaseTTL is how long the lead lasts unless renewed.
func (hk *Hooks) LeaseTTL() time.Duration {
	return max(leaseMin, hk.Cfg.Webhooks.Timeout.D()+leaseExtra)
}

// sendingLocked reports whether this replica sends deliveries at now:
// always when nothing is shared; while it holds the lease, leaseMargin
// short of its end, when shared. hk.Mu must be held.
func (hk *Hooks) sendingLocked(now time.Time) bool {
	return hk.Leading && (hk.Share == nil || now.Before(hk.SendUntil))
}

// stepDown stops sending. A leader that gives the lease up (a stop)
// first writes what it has not (the outcomes of its last attempts); one
// that lost it (lost), or may have, writes nothing more of deliveries:
// the next leader owns them, and may have changed them since.
func (hk *Hooks) stepDown(ctx context.Context, lost bool) {
	if !lost {
		hk.Sync(ctx)
	}
	hk.persistMu.Lock()
	hk.Mu.Lock()
	hk.stepDownLocked()
	hk.Mu.Unlock()
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
// hk.persistMu and hk.Mu must be held.
func (hk *Hooks) stepDownLocked() {
	if hk.Share == nil || !hk.Leading {
		return
	}
	hk.Leading = false
	hk.term++
	hk.Share.behind = true
	now := time.Now().UnixNano()
	for _, d := range hk.Ready {
		if e := hk.Endpoints[d.EndpointID]; e != nil {
			e.Inflight--
		}
		d.NextAt = now
		hk.scheduleLocked(d)
	}
	hk.Ready = nil
	for _, e := range hk.Endpoints {
		for _, d := range e.Waiting {
			d.NextAt = now
			hk.scheduleLocked(d)
		}
		e.Waiting = nil
		if e.cancelAttempts != nil {
			e.cancelAttempts()
			e.attempts, e.cancelAttempts = nil, nil
		}
	}
	for k := range hk.Touched {
		if hk.indexed[k] && (strings.HasPrefix(k, kindDelivery+":") || strings.HasPrefix(k, KindEvent+":")) {
			delete(hk.Touched, k)
		}
	}
}

// release gives the lead up, if this replica holds it, so that another
// takes it at its next tick rather than when it runs out: for a stop.
func (hk *Hooks) Release(ctx context.Context) {
	if hk.Share == nil {
		return
	}
	hk.Mu.Lock()
	leading := hk.Leading
	hk.Mu.Unlock()
	if !leading {
		return
	}
	hk.stepDown(ctx, false)
	name := []byte(hk.Share.name)
	hk.Share.st.CompareAndSwap(ctx, ShareLead, name, nil, time.Time{})
}

// fresh catches the copy up, reading it again whole under the lock when
// the feed cannot tell (catchUp): for a read, and a follower's tick.
func (hk *Hooks) Fresh(ctx context.Context) error {
	err := hk.CatchUp(ctx, false)
	if errors.Is(err, errBehind) {
		err = hk.Locked(ctx, func() {})
	}
	return err
}
