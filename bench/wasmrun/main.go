// Command wasmrun runs a test binary of the root package compiled to
// wasip1 (go test -c), as bench/wasm-factor.sh does, with the host
// functions the edge host provides (internal/store/hoststore,
// deeplink_host): a test binary of the edge build keeps its
// state on the host, as the module does. The store is an embedded one in
// a temporary directory, durability "interval"; the host's file system is
// mounted at /, and the working directory is the caller's.
//
//	go run ./bench/wasmrun TESTBIN [test flags]
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"deeplink/internal/egress"
	"deeplink/internal/store/embedded"
	"deeplink/internal/store/hoststore"
	"deeplink/internal/wire"
)

func main() { os.Exit(doMain()) }

func doMain() int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmrun TESTBIN [test flags]")
		return 2
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "wasmrun")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	db, err := embedded.Open(dir, embedded.Options{Durability: embedded.Interval})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	b := &hoststore.Backend{Failing: db.Failing, Len: db.Len, Count: db.Count}

	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	i32 := api.ValueTypeI32
	var stash []byte // the module runs one call at a time: its last long reply
	_, err = rt.NewHostModuleBuilder("deeplink_store").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
		frame, _ := mod.Memory().Read(uint32(s[0]), uint32(s[1]))
		reply := b.Serve(ctx, db, frame)
		if len(reply) <= int(uint32(s[3])) {
			mod.Memory().Write(uint32(s[2]), reply)
		} else {
			stash = reply
		}
		s[0] = uint64(len(reply))
	}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).Export("call").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
		mod.Memory().Write(uint32(s[0]), stash)
	}), []api.ValueType{i32, i32}, nil).Export("result").
		Instantiate(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = rt.NewHostModuleBuilder("deeplink_host").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
		name, _ := mod.Memory().Read(uint32(s[0]), uint32(s[1]))
		_, err := time.LoadLocation(string(name))
		s[0] = 0
		if err == nil {
			s[0] = 1
		}
	}), []api.ValueType{i32, i32}, []api.ValueType{i32}).Export("known_zone").
		// fetch answers that nothing could be fetched: no test the factor
		// runs checks association files.
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, s []uint64) {
		b, _ := mod.Memory().Read(uint32(s[0]), uint32(s[1]))
		var f wire.Fetch
		json.Unmarshal(b, &f)
		files := make([]egress.File, len(f.URLs))
		for i := range files {
			files[i].Err = "wasmrun fetches nothing"
		}
		reply, _ := json.Marshal(files)
		if len(reply) <= int(uint32(s[3])) {
			mod.Memory().Write(uint32(s[2]), reply)
		}
		s[0] = uint64(len(reply))
	}), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).Export("fetch").
		Instantiate(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wasmBytes, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wd, _ := os.Getwd()
	cfg := wazero.NewModuleConfig().WithArgs(append([]string{"test"}, os.Args[2:]...)...).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().WithRandSource(rand.Reader).
		WithStdout(os.Stdout).WithStderr(os.Stderr).
		WithEnv("PWD", wd).WithEnv("TMPDIR", os.TempDir()).
		WithFSConfig(wazero.NewFSConfig().WithDirMount("/", "/"))
	if _, err := rt.InstantiateWithConfig(ctx, wasmBytes, cfg); err != nil {
		if exit, ok := err.(*sys.ExitError); ok {
			return int(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
