package main

import (
	"context"
	"log/slog"
	"time"

	"deeplink/internal/buildinfo"
	"deeplink/internal/config"
	"deeplink/internal/store"
	"deeplink/internal/webhook"
)

// The host's webhook dispatcher: the webhook engine of the native build
// (internal/webhook), run natively on the host's store. The module's
// primary instance serves the webhook routes: it makes the deliveries
// and changes the endpoints, writing each change to the store; the
// dispatcher takes them in, signs and sends the deliveries and records
// their attempts. The two share the webhook state as replicas on Redis
// do (a lock for changes, a feed of what each wrote), and the dispatcher
// alone holds the delivery lease: the module never takes it
// (webhook.Hooks.NoLead). On Redis the dispatcher is a replica like the
// native ones, and sends while it holds the lease.

// version is set at link time with -ldflags "-X main.version=…", as the
// native binary's; when empty, the build's own information says.
var version = ""

// The User-Agent names the host's build, as the native binary names its.
func init() { webhook.UserAgent += "/" + buildinfo.Product(version) }

// startHooks reads the webhook state in st back and starts sending.
func startHooks(cfg *config.Config, st store.Store) (*webhook.Hooks, error) {
	ctx := context.Background()
	hk := webhook.NewHooks(cfg)
	hk.Log = slog.Default()
	hk.St = st
	if err := hk.ShareWith(ctx, st, ""); err != nil {
		return nil, err
	}
	if err := hk.LoadStore(ctx); err != nil {
		return nil, err
	}
	if err := hk.Start(); err != nil {
		return nil, err
	}
	hk.Tick(time.Now()) // takes the lease now rather than in a second
	return hk, nil
}

// tickHooks ticks hk every second (the lease renewed, what the dispatcher
// changed written, the feed trimmed) until ctx ends: in a loop of its
// own, so that a module's long call never delays the lease.
func tickHooks(ctx context.Context, hk *webhook.Hooks) {
	everySecond(ctx, func(now time.Time) {
		if err := hk.Tick(now); err != nil {
			slog.Error("webhooks: writing the state failed; trying again at the next tick", "err", err)
		}
	})
}

// stopHooks stops sending (attempts under way are cancelled: their
// deliveries stay pending, to be sent after a restart), writes what the
// dispatcher changed last and gives the lease up.
func stopHooks(hk *webhook.Hooks) error {
	ctx := context.Background()
	hk.Stop()
	err := hk.Sync(ctx)
	hk.Release(ctx)
	return err
}
