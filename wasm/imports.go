package main

import (
	"context"
	"time"
	_ "time/tzdata" // the modules' zone checks (knownZone) must work without /usr/share/zoneinfo

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
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
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
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
		}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		WithParameterNames("name", "name_len").
		Export("known_zone").
		Instantiate(ctx)
	return err
}
