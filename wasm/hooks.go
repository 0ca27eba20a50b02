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

// The host's webhook sender: the webhook engine of the native build
// (internal/webhook), run natively on the host's store. The module's
// instances serve the webhook routes, making deliveries and changing
// endpoints in the store; the host's sender claims the deliveries from
// the queue there, signs and sends them, and records their attempts
// (the module never sends: webhook.Hooks.NoSend). On Redis the host is
// a replica like the native ones.

// version is set at link time with -ldflags "-X main.version=…", as the
// native binary's; when empty, the build's own information says.
var version = ""

// The User-Agent names the host's build, as the native binary names its.
func init() { webhook.UserAgent += "/" + buildinfo.Product(version) }

// startHooks upgrades the webhook state in st if an earlier build wrote
// it, frees the claims of the host before when st is this host's alone
// (not Redis), and starts sending.
func startHooks(cfg *config.Config, st store.Store, alone bool) (*webhook.Hooks, error) {
	hk := webhook.NewHooks(cfg)
	hk.Log = slog.Default()
	hk.St = st
	hk.Alone = alone
	if err := hk.Open(context.Background()); err != nil {
		return nil, err
	}
	if err := hk.Start(); err != nil {
		return nil, err
	}
	return hk, nil
}

// tickHooks ticks hk every second (its housekeeping: endpoints failing
// for webhooks.disable_after, rotations that ended) until ctx ends.
func tickHooks(ctx context.Context, hk *webhook.Hooks) {
	everySecond(ctx, func(now time.Time) {
		if err := hk.Tick(now); err != nil {
			slog.Error("webhooks: housekeeping failed; trying again at the next tick", "err", err)
		}
	})
}

// stopHooks stops sending: attempts under way are cut short, their
// deliveries given back, due at once, for the next start.
func stopHooks(hk *webhook.Hooks) error {
	hk.Stop()
	return nil
}
