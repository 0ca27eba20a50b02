package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// TestTakeGive: requests any instance may serve take any free one; those
// that wait on another site take a worker, and wait for one rather than
// take the primary; a request whose client leaves while it waits gives up.
func TestTakeGive(t *testing.T) {
	newPool := func(workers int) (*host, *instance, []*instance) {
		h := &host{free: make(chan *instance, workers), primaryFree: make(chan *instance, 1)}
		p := &instance{h: h, slot: 0}
		h.give(p)
		var ws []*instance
		for i := range workers {
			w := &instance{h: h, slot: i + 1, worker: true}
			ws = append(ws, w)
			h.give(w)
		}
		return h, p, ws
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	h, p, _ := newPool(0)
	if in, err := h.take(context.Background(), false); in != p || err != nil {
		t.Fatalf("take(any) with the primary alone = %v, %v; want the primary", in, err)
	}
	if in, err := h.take(canceled, false); !errors.Is(err, errGivenUp) {
		t.Fatalf("take(any) with none free, the request gone = %v, %v; want errGivenUp", in, err)
	}
	h.give(p)
	if in, err := h.take(canceled, true); !errors.Is(err, errGivenUp) {
		t.Fatalf("take(worker) with only the primary free, the request gone = %v, %v; want errGivenUp", in, err)
	}

	h, p, ws := newPool(1)
	for range 10 { // whichever is ready first, never the primary
		in, err := h.take(context.Background(), true)
		if in != ws[0] || err != nil {
			t.Fatalf("take(worker) = %v, %v; want the worker", in, err)
		}
		h.give(in)
	}
	a, _ := h.take(context.Background(), false)
	b, _ := h.take(context.Background(), false)
	if a == b || (a != p && b != p) {
		t.Fatalf("two take(any) = %v, %v; want the primary and the worker", a, b)
	}
	h.give(a)
	h.give(b)
	if len(h.primaryFree) != 1 || len(h.free) != 1 {
		t.Fatalf("after give: %d primary and %d workers free; want 1 and 1", len(h.primaryFree), len(h.free))
	}
}

// TestAnswer: the host's own answers take the form of their route's
// errors (API.md §3, §4.2), and a 503 says when to retry.
func TestAnswer(t *testing.T) {
	const token, hooks = "/stores/s1/auth/token", "/stores/s1/webhooks"
	for _, tt := range []struct {
		path, code   string
		status       int
		body         string // a part of it
		retry, store string // Retry-After, Cache-Control
	}{
		{token, "unavailable", 503, `"error":"temporarily_unavailable"`, "1", "no-store"},
		{token, "internal", 500, `"error":"server_error"`, "", "no-store"},
		{token, "invalid_request", 400, `"error":"invalid_request"`, "", "no-store"},
		{hooks, "unavailable", 503, `"code":"unavailable"`, "1", ""},
		{hooks, "internal", 500, `"code":"internal"`, "", ""},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, tt.path, nil)
		(&host{}).answer(w, r, "id", time.Now(), tt.status, tt.code, "why")
		if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.body) ||
			w.Header().Get("Retry-After") != tt.retry || w.Header().Get("Cache-Control") != tt.store {
			t.Errorf("answer(%s, %d) = %d %q, Retry-After %q, Cache-Control %q; want %d with %s, %q, %q",
				tt.path, tt.status, w.Code, w.Body, w.Header().Get("Retry-After"), w.Header().Get("Cache-Control"), tt.status, tt.body, tt.retry, tt.store)
		}
	}
}

// exporting is a minimal module with one function, exported as name.
func exporting(name string) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, 1, 4, 1, 0x60, 0, 0) // types: func()
	b = append(b, 3, 2, 1, 0)          // functions: one of type 0
	b = append(b, 7, byte(4+len(name)), 1, byte(len(name)))
	b = append(b, name...)
	b = append(b, 0, 0)                    // exports: name, the function 0
	return append(b, 10, 4, 1, 2, 0, 0x0b) // code: an empty body
}

// TestCheckBuiltForHost: a module that still exports its own metrics
// (built before the host counted the requests) is refused, with what to
// do; one of this build's exports is not.
func TestCheckBuiltForHost(t *testing.T) {
	for _, tt := range []struct {
		export string
		bad    bool
	}{
		{"handle", false},
		{"metrics", true},
	} {
		rt := wazero.NewRuntime(t.Context())
		t.Cleanup(func() { rt.Close(context.Background()) })
		m, err := rt.CompileModule(t.Context(), exporting(tt.export))
		require.NoError(t, err)
		err = checkBuiltForHost(m)
		if got := err != nil; got != tt.bad {
			t.Errorf("checkBuiltForHost(a module exporting %q) = %v; want an error: %v", tt.export, err, tt.bad)
		}
		if err != nil {
			assert.Contains(t, err.Error(), "go generate ./wasm")
		}
	}
}
