package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
	_ "time/tzdata" // the modules' zone checks (knownZone) must work without /usr/share/zoneinfo

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"deeplink/internal/egress"
	"deeplink/internal/wire"
)

// WASI's errno values used here.
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28
)

// hostStart is the origin of the monotonic clock the modules see.
var hostStart = time.Now()

// instantiateWASI provides wasi_snapshot_preview1 to the modules of rt:
// wazero's, but for clock_time_get, which also cuts off a call past its
// deadline (callState.check). The Go runtime of the module reads the
// clock in its scheduler, its timers and its garbage collector, so a call
// that runs away while it does anything but pure computation is cut off
// there, at no cost to the calls that keep to their deadline (wazero's
// own way, termination checks compiled into every loop of the module,
// costs 2.6 times the call: docs/edge.md).
func instantiateWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(clockTimeGet), []api.ValueType{api.ValueTypeI32, api.ValueTypeI64, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		WithParameterNames("id", "precision", "result.timestamp").
		Export("clock_time_get")
	_, err := b.Instantiate(ctx)
	return err
}

// clockTimeGet is WASI's clock_time_get(id, precision, result) for the
// realtime (0) and monotonic (1) clocks, the real ones, as the modules'
// configurations ask (WithSysWalltime, WithSysNanotime).
func clockTimeGet(ctx context.Context, mod api.Module, stack []uint64) {
	if c, ok := ctx.Value(callKey{}).(*callState); ok {
		c.check()
	}
	var v int64
	switch uint32(stack[0]) {
	case 0:
		v = time.Now().UnixNano()
	case 1:
		v = int64(time.Since(hostStart))
	default:
		stack[0] = errnoInval
		return
	}
	if !mod.Memory().WriteUint64Le(uint32(stack[2]), uint64(v)) {
		stack[0] = errnoFault
		return
	}
	stack[0] = errnoSuccess
}

// instantiateHost provides deeplink_host to the modules of rt: what the
// module asks of its host beyond the store.
//
//	known_zone(name, name_len) -> 1 or 0
//
// reports whether name is a zone of the IANA database, for the module's
// check of a registration's timezone: the database is the host's (450 KB
// the module does not carry).
//
//	fetch(req, req_len, out, out_cap) -> n
//
// fetches the files of the wire.Fetch at req (JSON) through client, all
// at once, for the dashboard's association check (the module has no
// sockets), and returns the length n of the JSON of their []egress.File,
// written at out when n <= out_cap.
func instantiateHost(ctx context.Context, rt wazero.Runtime, client *http.Client) error {
	i32 := api.ValueTypeI32
	_, err := rt.NewHostModuleBuilder("deeplink_host").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			name, ok := mod.Memory().Read(uint32(stack[0]), uint32(stack[1]))
			if !ok {
				panic("deeplink_host.known_zone: name out of the module's memory")
			}
			stack[0] = 0
			if _, err := time.LoadLocation(string(name)); err == nil {
				stack[0] = 1
			}
		}), []api.ValueType{i32, i32}, []api.ValueType{i32}).
		WithParameterNames("name", "name_len").
		Export("known_zone").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			stack[0] = uint64(fetch(ctx, client, mod, uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])))
		}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("req", "req_len", "out", "out_cap").
		Export("fetch").
		Instantiate(ctx)
	return err
}

// fetch serves deeplink_host.fetch. While it fetches, the call is the
// host's, as in a store call (storeCall): the watchdog leaves it be, and
// the fetches end a little before the call's deadline, so that the module
// has the time to show what they found.
func fetch(ctx context.Context, client *http.Client, mod api.Module, req, reqLen, out, outCap uint32) uint32 {
	c := callOf(ctx)
	c.check()
	b, ok := mod.Memory().Read(req, min(reqLen, 64<<10))
	var f wire.Fetch
	if !ok || reqLen > 64<<10 || json.Unmarshal(b, &f) != nil || len(f.URLs) > wire.MaxFetchURLs || f.Limit < 0 || f.Limit > wire.MaxFetchLimit {
		panic("deeplink_host.fetch: malformed request")
	}
	if !c.deadline.IsZero() {
		c.dog.inHost(c.slot, c.watched)
		defer c.dog.back(c.slot, c.watched)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline.Add(-min(time.Second, time.Until(c.deadline)/2)))
		defer cancel()
	}
	reply, err := json.Marshal(egress.GetFiles(ctx, client, f.URLs, f.Limit))
	if err != nil {
		panic("deeplink_host.fetch: " + err.Error())
	}
	if len(reply) <= int(outCap) && !mod.Memory().Write(out, reply) {
		panic("deeplink_host.fetch: answer buffer out of the module's memory")
	}
	return uint32(len(reply))
}
