package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"deeplink/internal/config"
	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/store/hoststore"
	"deeplink/internal/store/redisstore"
)

// The host keeps the service's state, and the module reaches it through
// the host functions of deeplink_store (internal/store/hoststore): the
// module's instances hold none of it, so any of them can serve any
// request, and one that fails is thrown away without losing anything.

// hostState is the store the host keeps and lends the modules.
type hostState struct {
	// store is the store itself: the host's webhook sender works
	// it (hooks.go); the modules see it through view.
	store store.Store
	// backend is what the store tells of itself beyond the contract.
	backend hoststore.Backend
	// view returns a fresh view of the store for one call into a module.
	view func() view
	// close makes every change durable and releases the store.
	close func() error
	// remote: the store is another server's (Redis), whose calls can
	// wait on the network: they get the call's deadline.
	remote bool
}

// view is the store as one call changes it: Wait returns once what the
// call changed is durable.
type view interface {
	store.Store
	Wait(ctx context.Context) error
}

// openState opens the store cfg names, as the native build does: the
// embedded one in dataDir (cfg's durability and budget of live entries;
// an earlier build's files, before the store contract, are the native
// binary's to convert), or Redis.
func openState(cfg *config.Config, dataDir string) (*hostState, error) {
	if cfg.Storage.Backend == "redis" {
		w, err := redisstore.OpenWatched(redisstore.Options{
			URL:    cfg.Storage.RedisURL,
			Prefix: cfg.Storage.RedisPrefix,
			Logger: slog.Default(),
		})
		if err != nil {
			return nil, err // config.Parse checked the URL: not reached
		}
		// Redis has no cheap count of a prefix's keys (no Len, no Count):
		// /metrics leaves those gauges out, as the native build does.
		return &hostState{store: w, backend: hoststore.Backend{Failing: w.Failing}, view: func() view { return redisView{w} }, close: w.Close, remote: true}, nil
	}
	for _, old := range []string{"store-00.snap", "store-00.log", "webhooks.json", "cookie.key"} {
		if _, err := os.Stat(filepath.Join(dataDir, old)); err == nil {
			return nil, fmt.Errorf("data_dir: %s is an earlier build's file: run the native binary once on this data_dir to convert it", old)
		}
	}
	db, err := embedded.Open(dataDir, embedded.Options{
		Durability: embedded.Durability(cfg.Storage.Durability),
		MaxLive:    cfg.MaxLiveEntries,
		Logger:     slog.Default(),
	})
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	return &hostState{
		store:   db,
		backend: hoststore.Backend{Failing: db.Failing, Len: db.Len, Count: db.Count},
		view:    func() view { return db.Defer() },
		close:   db.Close,
	}, nil
}

// redisView is the view of a call on Redis: each change is as durable as
// Redis's own persistence makes it when the call returns, and Wait has
// nothing left to wait for.
type redisView struct{ store.Store }

func (redisView) Wait(context.Context) error { return nil }

// instantiateStore provides deeplink_store to the modules of rt, served
// by b on the store view of each call (callState).
func instantiateStore(ctx context.Context, rt wazero.Runtime, b *hoststore.Backend) error {
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder("deeplink_store").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			stack[0] = uint64(storeCall(ctx, b, mod, uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])))
		}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		Export("call").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			storeResult(ctx, mod, uint32(stack[0]), uint32(stack[1]))
		}), []api.ValueType{i32, i32}, nil).
		Export("result").
		Instantiate(ctx)
	return err
}

// storeCall serves the request frame at req and writes the reply at out
// if it fits in outCap, else keeps it for storeResult; it returns the
// reply's length. A frame out of the module's memory is a fault of the
// instance: the panic becomes its trap, and the host replaces it.
//
// While it serves, the call is the host's, not the module's: the watchdog
// leaves it be (a store that answers slowly is no runaway), and the store
// gets the call's deadline instead, past which it answers unavailable.
func storeCall(ctx context.Context, b *hoststore.Backend, mod api.Module, req, reqLen, out, outCap uint32) uint32 {
	c := callOf(ctx)
	c.check()
	if reqLen > maxFrame {
		panic("deeplink_store.call: request frame over 16 MiB")
	}
	frame, ok := mod.Memory().Read(req, reqLen)
	if !ok {
		panic("deeplink_store.call: request out of the module's memory")
	}
	if !c.deadline.IsZero() {
		c.dog.inHost(c.slot, c.watched)
		defer c.dog.back(c.slot, c.watched)
		if c.remote {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, c.deadline)
			defer cancel()
		}
	}
	reply := b.Serve(ctx, c.view, frame)
	if len(reply) <= int(outCap) {
		if !mod.Memory().Write(out, reply) {
			panic("deeplink_store.call: reply buffer out of the module's memory")
		}
	} else {
		c.stash = reply
	}
	return uint32(len(reply))
}

// storeResult writes the reply storeCall kept.
func storeResult(ctx context.Context, mod api.Module, out, n uint32) {
	c := callOf(ctx)
	if c.stash == nil || uint32(len(c.stash)) != n || !mod.Memory().Write(out, c.stash) {
		panic("deeplink_store.result: no reply of that length kept, or buffer out of memory")
	}
	c.stash = nil
}

// callState is what the host keeps for one call into an instance, found
// by the host functions in the call's context.
type callState struct {
	name     string    // the export called
	deadline time.Time // past it, the call is cut off at its next host call; zero: none
	dog      *watchdog // watches the call while it runs in the module
	slot     int       // the instance's, for dog
	watched  int64     // the call's id for dog
	remote   bool      // the store's calls get the deadline (hostState.remote)

	// view is the store as the call changes it: its changes are made at
	// once, and made durable (view.Wait) after the call, once the
	// instance is free for its next one (embedded.Deferred).
	view  view
	stash []byte // a reply too large for the module's buffer, until it asks
}

type callKey struct{}

// maxFrame bounds a store request: the largest value the service stores
// is a 64 KiB event body, with its delivery records. A module asking for
// more is broken or hostile.
const maxFrame = 16 << 20

func callOf(ctx context.Context) *callState {
	c, _ := ctx.Value(callKey{}).(*callState)
	if c == nil {
		panic("deeplink_store: called outside a call of the host's")
	}
	return c
}

// errCallDeadline cuts off a call past its deadline: the host function
// that finds it panics with it, which wazero returns as the call's error,
// and the instance is replaced.
var errCallDeadline = errors.New("call past its deadline (-call-timeout): cut off at a host call")

// check cuts the call off if it is past its deadline.
func (c *callState) check() {
	if !c.deadline.IsZero() && time.Now().After(c.deadline) {
		panic(errCallDeadline)
	}
}
