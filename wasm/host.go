package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"deeplink/internal/serving"
	"deeplink/internal/store"
	"deeplink/internal/webhook"
	"deeplink/internal/wire"
)

// host runs a pool of instances of the module, one slot each. An
// instance runs one call at a time; none keeps state the store does not
// have, so a request may go to any of them, except those wire.Primary
// sends to the primary (slot 0). The host's sender (hooks) sends the
// deliveries the instances make.
type host struct {
	state    *hostState
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	args     wire.StartArgs
	client   *http.Client     // the association check's fetches (deeplink_host.fetch)
	hooks    *webhook.Hooks   // the webhook sender (hooks.go)
	requests *serving.Metrics // every request the host answers, whichever instance served it

	slots       []atomic.Pointer[instance] // the instance in each slot now; the primary first
	free        chan *instance             // the workers free to take a request any may serve
	primaryFree chan *instance             // the primary, when free to take one too (it also takes its own)
	workers     atomic.Int32               // workers started
	started     atomic.Uint64              // numbers the instances started
	dog         *watchdog                  // kills the host when a call runs away (nil: no deadline)
}

// instance is one instance of the module.
type instance struct {
	h      *host
	slot   int
	worker bool
	// id is the instance's number among those the host started: the loop
	// cancels the requests of one replaced, whose outcomes its successor,
	// knowing none of their jobs, would drop (it sends what is pending
	// again).
	id uint64

	mu  sync.Mutex // guards the fields below: one call at a time
	mod api.Module // nil after a failed start
	fn  map[string]api.Function
}

var exports = []string{"buffer", "start", "handle", "tick", "stop"}

// newHost starts the primary, and returns once it serves: the workers
// start meanwhile, each taking requests once it has started (a slot is
// empty until then), so that a launch is ready as soon as one instance
// is.
func newHost(state *hostState, dog *watchdog, rt wazero.Runtime, compiled wazero.CompiledModule, n int, args wire.StartArgs) (*host, error) {
	h := &host{state: state, dog: dog, rt: rt, compiled: compiled, args: args,
		slots: make([]atomic.Pointer[instance], n), free: make(chan *instance, n), primaryFree: make(chan *instance, 1)}
	in, err := h.startInstance(0)
	if err != nil {
		return nil, err
	}
	h.slots[0].Store(in)
	h.primaryFree <- in
	began := time.Now()
	for i := 1; i < n; i++ {
		go func() {
			for wait := time.Second; ; wait = min(2*wait, time.Minute) {
				in, err := h.startInstance(i)
				if err == nil {
					h.slots[i].Store(in)
					h.workers.Add(1)
					h.free <- in
					slog.Info("edge module: a worker instance started", "slot", i, "after", time.Since(began).String())
					return
				}
				slog.Error("edge module: a worker instance did not start; serving with fewer, trying again", "err", err, "in", wait.String())
				time.Sleep(wait)
			}
		}()
	}
	return h, nil
}

// startInstance starts a fresh instance for slot.
func (h *host) startInstance(slot int) (*instance, error) {
	in := &instance{h: h, slot: slot, worker: slot > 0}
	in.mu.Lock()
	defer in.mu.Unlock()
	view := h.state.view()
	if err := in.instantiateLocked(view); err != nil {
		return nil, err
	}
	if err := view.Wait(context.Background()); err != nil {
		in.mod.Close(context.Background())
		return nil, err
	}
	return in, nil
}

// instantiateLocked starts a fresh module instance, its start changing
// the store through view. in.mu must be held.
func (in *instance) instantiateLocked(view view) error {
	ctx := context.Background()
	in.id = in.h.started.Add(1)
	if in.mod != nil {
		in.mod.Close(ctx)
		in.mod = nil
	}
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous, so that many can be instantiated
		WithStartFunctions("_initialize").
		// wazero's defaults are a fake clock and a deterministic random
		// source: codes, secrets and TTLs need the real ones.
		WithSysWalltime().
		WithSysNanotime().
		WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithStdout(os.Stdout).
		WithStderr(os.Stderr).
		WithArgs("deeplink")
	mod, err := in.h.rt.InstantiateModule(ctx, in.h.compiled, cfg)
	if err != nil {
		return fmt.Errorf("module: %w", err)
	}
	fn := map[string]api.Function{}
	for _, name := range exports {
		if fn[name] = mod.ExportedFunction(name); fn[name] == nil {
			mod.Close(ctx)
			return fmt.Errorf("module: no export %q; is it the edge build of this version?", name)
		}
	}
	in.mod, in.fn = mod, fn
	args := in.h.args
	args.Worker = in.worker
	b, _ := json.Marshal(args)
	msg, err := in.callLocked(view, "start", b)
	if err == nil && len(msg) > 0 {
		err = errors.New(string(msg))
	}
	if err != nil { // a half-started instance must not serve
		mod.Close(ctx)
		in.mod = nil
	}
	return err
}

// errNotRunning is a call to an instance whose restart failed (its store
// unreachable, say): the next call tries again.
var errNotRunning = errors.New("the module is not running (its restart failed)")

// callLocked calls export name with b as its input buffer and returns its
// result, copied out of the module's memory. A trap, a panic that escaped
// the module or a call cut off at its deadline fails the instance; the
// caller replaces it. The call's changes to the store are made through
// view, and are durable only once view.Wait has returned. in.mu must be
// held.
func (in *instance) callLocked(view view, name string, b []byte, args ...uint64) ([]byte, error) {
	if in.mod == nil {
		// Its restart failed (the store was unreachable, say): the next
		// call tries again; meanwhile the service is unavailable.
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, errNotRunning)
	}
	c := &callState{view: view, name: name, dog: in.h.dog, slot: in.slot, remote: in.h.state.remote}
	// Start has no deadline: the primary's reads the whole webhook state
	// back from the store, which for a long delivery log takes longer
	// than a request may; under the deadline it could neither start nor
	// replace a failed instance.
	if *callTimeout > 0 && name != "start" {
		c.deadline = time.Now().Add(*callTimeout)
		c.watched = in.h.dog.arm(in.slot)
		defer in.h.dog.disarm(in.slot)
	}
	ctx := context.WithValue(context.Background(), callKey{}, c)
	if b != nil {
		res, err := in.fn["buffer"].Call(ctx, uint64(len(b)))
		if err != nil {
			return nil, err
		}
		if !in.mod.Memory().Write(uint32(res[0]), b) {
			return nil, errors.New("module buffer out of range")
		}
		args = append([]uint64{uint64(len(b))}, args...)
	}
	res, err := in.fn[name].Call(ctx, args...)
	if err != nil || len(res) == 0 {
		return nil, err
	}
	ptr, n := uint32(res[0]>>32), uint32(res[0])
	if n == 0 {
		return nil, nil
	}
	out, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, errors.New("module result out of range")
	}
	return append([]byte(nil), out...), nil
}

// call runs export name on the instance in slot and returns once what it
// changed is durable. It also returns the id of the instance that ran it.
// A slot whose worker has not started yet answers nothing, and no error.
func (h *host) call(slot int, name string, b []byte, args ...uint64) (out []byte, id uint64, err error) {
	in := h.slots[slot].Load()
	if in == nil {
		return nil, 0, nil
	}
	out, id, wait, err := in.call(name, b, args...)
	return out, id, errors.Join(err, wait())
}

// call runs callLocked and, when the call failed, replaces the module
// instance with a fresh one. It returns with the instance free for
// another call, and wait, which returns once what the call changed is
// durable (an error wrapping store.ErrUnavailable when it cannot be): the
// caller must not acknowledge anything of the call before.
func (in *instance) call(name string, b []byte, args ...uint64) (out []byte, id uint64, wait func() error, err error) {
	view := in.h.state.view()
	wait = func() error { return view.Wait(context.Background()) }
	in.mu.Lock()
	defer in.mu.Unlock()
	id = in.id
	out, err = in.callLocked(view, name, b, args...)
	if err != nil {
		slog.Error("edge module failed; replacing the instance", "call", name, "worker", in.worker, "err", err)
		if rerr := in.instantiateLocked(view); rerr != nil {
			slog.Error("edge module restart failed", "err", rerr)
		}
	}
	return out, id, wait, err
}

// handle has an instance serve the framed request req for path: the
// primary those wire.Primary names; a worker, when one has started,
// those wire.Waits names; any free instance the others. A request whose
// ctx ends while it waits for an instance is given up (errGivenUp).
func (h *host) handle(ctx context.Context, path string, req []byte) (*wire.Response, error) {
	in, pooled := h.slots[0].Load(), !wire.Primary(path)
	if pooled {
		var err error
		if in, err = h.take(ctx, wire.Waits(path) && h.workers.Load() > 0); err != nil {
			return nil, err
		}
	}
	out, _, wait, err := in.call("handle", req)
	if pooled {
		h.give(in) // free for the next request while this one's changes are written
	}
	if err := errors.Join(err, wait()); err != nil {
		return nil, err
	}
	return wire.ParseResponse(out)
}

// errGivenUp is a request whose client left while it waited for an
// instance.
var errGivenUp = errors.New("the request ended before an instance was free")

// take returns a free instance, a worker when worker is true.
func (h *host) take(ctx context.Context, worker bool) (*instance, error) {
	primary := h.primaryFree
	if worker {
		primary = nil // never ready
	}
	select {
	case in := <-h.free:
		return in, nil
	case in := <-primary:
		return in, nil
	case <-ctx.Done():
		return nil, errGivenUp
	}
}

// give makes in, taken by take, free again.
func (h *host) give(in *instance) {
	if in.slot == 0 {
		h.primaryFree <- in
	} else {
		h.free <- in
	}
}

func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The id is decided here, so that an answer of the host's own (below)
	// carries it too; the module keeps it, a valid one, as its own.
	id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
	w.Header().Set(serving.RequestIDHeader, id)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		h.answer(w, r, id, start, http.StatusBadRequest, "invalid_request", "could not read the body")
		return
	}
	hdr := r.Header.Clone()
	hdr.Set("Host", r.Host)
	hdr.Set(serving.RequestIDHeader, id)
	req := wire.AppendRequest(nil, &wire.Request{Method: r.Method, URI: r.RequestURI, RemoteAddr: r.RemoteAddr, Header: hdr, Body: body})
	// The path as the module's mux matches it (wire.Primary).
	path := wire.RoutePath(r.URL.EscapedPath())
	var resp *wire.Response
	if path == "/metrics" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		resp, err = h.metrics(req)
	} else {
		resp, err = h.handle(r.Context(), path, req)
	}
	if err != nil {
		switch {
		case errors.Is(err, errGivenUp):
			// A client that left (or half-closed) while it waited.
			h.answer(w, r, id, start, http.StatusServiceUnavailable, "unavailable", errGivenUp.Error()+"; retry later")
		case errors.Is(err, errNotRunning):
			h.answer(w, r, id, start, http.StatusServiceUnavailable, "unavailable", "the service is restarting after a failure; retry later")
		case errors.Is(err, store.ErrUnavailable):
			// What the request changed could not be made durable after
			// the call.
			h.answer(w, r, id, start, http.StatusServiceUnavailable, "unavailable", "the service cannot persist its state; retry later")
		default:
			h.answer(w, r, id, start, http.StatusInternalServerError, "internal", "internal error")
		}
		return
	}
	if h.hooks != nil && r.Method != http.MethodGet && r.Method != http.MethodHead && wire.Queues(path) {
		h.hooks.Poke() // the module may have made a delivery: sent at once
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	n, _ := w.Write(resp.Body)
	d := time.Since(start)
	if resp.LogRoute == "" { // answered before its route was known (a panic's 500, a bad frame)
		resp.LogPath, resp.LogRoute = serving.LoggedPath(r.URL.Path, "", nil), "host"
	}
	h.requests.Observe(r.Method, resp.LogRoute, resp.Status, d)
	serving.LogRequest(slog.Default(), r, id, resp.LogPath, resp.LogRoute, resp.Status, int64(n), start.Add(d), d)
}

// answer sends an error of the host's own, when the module did not
// answer r, in the form r's route answers errors in: a 503 as the native
// build's (serving.Unavailable: Retry-After, the token endpoint's and the
// callback's own forms), the OAuth form (error, error_description) on the
// token endpoint, the service's ({"error":{"code","message"}})
// elsewhere. It logs r's line with the route "host": the module logged
// none, or one for an answer it could not give.
func (h *host) answer(w http.ResponseWriter, r *http.Request, id string, start time.Time, status int, code, msg string) {
	var n int
	if status == http.StatusServiceUnavailable {
		_, n = serving.Unavailable(w, r, msg)
	} else {
		var body []byte
		if token, _ := path.Match("/stores/*/auth/token", r.URL.Path); token {
			w.Header().Set("Cache-Control", "no-store")
			oauth := map[string]string{"invalid_request": "invalid_request", "internal": "server_error"}[code]
			body, _ = json.Marshal(map[string]string{"error": oauth, "error_description": msg})
		} else {
			body, _ = json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		n, _ = w.Write(append(body, '\n'))
	}
	d := time.Since(start)
	h.requests.Observe(r.Method, "host", status, d)
	serving.LogRequest(slog.Default(), r, id, serving.LoggedPath(r.URL.Path, "", nil), "host", status, int64(n), start.Add(d), d)
}

// stop has every instance write what it holds (its share of the
// fairness counts), workers first.
func (h *host) stop() error {
	var errs []error
	for i := len(h.slots) - 1; i >= 0; i-- {
		out, _, err := h.call(i, "stop", nil)
		if err == nil && len(out) > 0 {
			err = errors.New(string(out))
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// serveUnavailable answers while the modules are compiled and started, and
// while the host shuts down, as the native build does then
// (serving.Unavailable), why saying which. It logs and counts (in m)
// each request, with route as its route.
func serveUnavailable(m *serving.Metrics, route, why string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := serving.RequestID(r.Header.Get(serving.RequestIDHeader))
		w.Header().Set(serving.RequestIDHeader, id)
		status, n := serving.Unavailable(w, r, why)
		d := time.Since(start)
		m.Observe(r.Method, route, status, d)
		serving.LogRequest(slog.Default(), r, id, serving.LoggedPath(r.URL.Path, "", nil), route, status, int64(n), start.Add(d), d)
	})
}
