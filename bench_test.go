package main

// Performance checks. None of these run under `go test` without -bench; see
// bench/run.sh for the end-to-end load test against a yardstick server,
// and internal/store/embedded for the store's own.
//
//	go test -run='^$' -bench='Register|Redeem' -benchtime=2s ./

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	benchStoreID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	benchAPIKey  = "ak_demo_not_secret_do_not_deploy"
)

// BenchmarkRegister drives the whole handler (routing, logging, metrics,
// validation, store) with unique, valid registrations, 32 at once as
// bench/run.sh's connections, under each durability.
func BenchmarkRegister(b *testing.B) {
	for _, d := range []string{"fsync", "interval"} {
		b.Run(d, func(b *testing.B) { benchmarkRegister(b, d, 0) })
	}
}

// BenchmarkRegisterFullStore is BenchmarkRegister with a million codes
// live.
func BenchmarkRegisterFullStore(b *testing.B) { benchmarkRegister(b, "fsync", 1_000_000) }

// newBenchApp starts the service on the demo configuration with
// durability d, its data in a temporary directory, logging nowhere; the
// benchmark's cleanup closes it.
func newBenchApp(b *testing.B, d string) *app {
	cfg, err := ParseConfig(demoConfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	cfg.Storage.Durability = d
	// The default cap (2 M) could be reached by a long -benchtime; a 503
	// would then fail the benchmark for a reason that is not its subject.
	cfg.MaxLiveEntries = 1 << 30
	// Nor the key's request budget: it is counted (its cost is part of
	// the path measured) but never reached.
	cfg.Fairness.KeyRate, cfg.Fairness.KeyBurst = 1e9, 1<<30
	a, err := newApp(cfg, newLogger(io.Discard), true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return a
}

// fillCodes puts n codes of rec in a's store, from 64 goroutines so that
// their fsyncs are shared.
func fillCodes(b *testing.B, a *app, n int, prefix string, rec codeRecord) {
	v := rec.appendTo(nil)
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < n; j += 64 {
				if err := a.store.Insert(context.Background(), codeKey(benchStoreID, fmt.Sprintf("%s%016d", prefix, j)).name(), v, exp); err != nil {
					failed.Store(&err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// benchmarkRegister registers codes 32 at once through the service's
// handler, with live codes already in the store.
func benchmarkRegister(b *testing.B, durability string, live int) {
	a := newBenchApp(b, durability)
	if live > 0 {
		fillCodes(b, a, live, "live-", benchRecord(0))
	}
	h := a.srv.handler()

	const path = "/stores/" + benchStoreID + "/auth/auth-code"
	// The body up to the auth_code's unique suffix, and from there on.
	head := []byte(`{"auth_code":"bench-code-`)
	tail := []byte(`","redirect_uri":"http://127.0.0.1:8080/stores/` + benchStoreID + `/auth/callback",` +
		`"client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301",` +
		`"code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"af0ifjsldkj",` +
		`"first_name":"Ada","last_name":"Lovelace","language":"en-GB","currency":"EUR","country":"GB",` +
		`"timezone":"Europe/London"}`)

	// From a random start: on the edge module (wasip1), every run of the
	// benchmark shares the host's one store.
	var seq atomic.Uint64
	seq.Store(rand.Uint64N(1e14))
	b.ReportAllocs()
	b.SetParallelism(16) // 32 at once on two Ps
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { reportCPU(b, processCPU()-cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		body := make([]byte, 0, len(head)+20+len(tail))
		rd := new(strings.Reader)
		for pb.Next() {
			body = append(body[:0], head...)
			body = strconv.AppendUint(body, 1e15+seq.Add(1), 10) // 16 digits: auth_code ≥ 16 chars
			body = append(body, tail...)
			rd.Reset(string(body))
			r := httptest.NewRequest(http.MethodPost, path, rd)
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-API-Key", benchAPIKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body.String())
			}
		}
	})
}

// BenchmarkRedeem exchanges registered codes at the token endpoint under
// each durability: the difference is what durability costs a sign-in.
// "alone" is one redemption at a time, its latency; "32" is 32 at once on
// two Ps, as bench/run.sh's connections, whose ns/op is the inverse of
// the throughput.
func BenchmarkRedeem(b *testing.B) {
	for _, d := range []string{"fsync", "interval"} {
		for _, par := range []int{0, 16} {
			name := d + map[int]string{0: "/alone", 16: "/32"}[par]
			b.Run(name, func(b *testing.B) { benchmarkRedeem(b, d, par) })
		}
	}
}

// benchmarkRedeem is BenchmarkRedeem, with par redemptions at once per P
// (RunParallel), or one at a time if 0.
func benchmarkRedeem(b *testing.B, durability string, par int) {
	a := newBenchApp(b, durability)
	const verifier = "dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY"
	rec := benchRecord(0)
	rec.CodeChallenge = s256(verifier)
	fillCodes(b, a, b.N, "bench-code-", rec)
	h := a.srv.handler()
	const path = "/stores/" + benchStoreID + "/auth/token"
	form := "grant_type=authorization_code&redirect_uri=" + url.QueryEscape(rec.RedirectURI) +
		"&code_verifier=" + verifier + "&code=bench-code-"
	var seq atomic.Int64
	redeem := func() {
		body := fmt.Sprintf("%s%016d", form, seq.Add(1)-1)
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if par == 0 {
		for range b.N {
			redeem()
		}
		return
	}
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			redeem()
		}
	})
}

// reportCPU reports the process's CPU time per operation (all goroutines:
// handlers, the store's ticker, the GC), which on a busy shared host is a
// steadier figure than ns/op.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchRecord is a realistic registered code: lengths as a real game app
// would send them.
func benchRecord(n uint64) codeRecord {
	return codeRecord{
		RedirectURI:   fmt.Sprintf("https://shop.example.com/stores/%08d/auth/callback", n%1e8), // 59 chars
		CodeChallenge: "9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs",
		Player: Player{
			ClientReferenceID: fmt.Sprintf("3f2504e0-4f89-41d3-9a0c-%012d", n%1e12), // 36 chars
			FirstName:         "Marguerite",
			LastName:          "Lovelace-Byron",
			Language:          "pt-BR",
			Currency:          "EUR",
			Country:           "BR",
			Timezone:          "America/Sao_Paulo",
		},
	}
}

// BenchmarkRegisterBody decodes and validates a register body, the part of
// the handler that reads what the game app sent, without net/http around it.
func BenchmarkRegisterBody(b *testing.B) {
	cfg, err := ParseConfig(demoConfig)
	if err != nil {
		b.Fatal(err)
	}
	s := &server{cfg: cfg}
	st := cfg.Store(benchStoreID)
	body := []byte(`{"auth_code":"bench-code-1000000000000001","redirect_uri":"http://127.0.0.1:8080/stores/` + benchStoreID + `/auth/callback",` +
		`"client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301",` +
		`"code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"af0ifjsldkj",` +
		`"first_name":"Ada","last_name":"Lovelace","language":"en-GB","currency":"EUR","country":"GB",` +
		`"timezone":"Europe/London"}`)
	b.ReportAllocs()
	for b.Loop() {
		var req registerRequest
		if err := req.decode(body); err != nil {
			b.Fatal(err)
		}
		if fields, ok := s.validateRegister(st, &req); len(fields) > 0 || !ok {
			b.Fatalf("invalid: %v %v", fields, ok)
		}
	}
}

// BenchmarkTokenJSON reads token request bodies: a usual one, and the
// worst a client without any key may send, 64 KiB of short members (each
// name once: a name twice ends the reading there).
func BenchmarkTokenJSON(b *testing.B) {
	usual := []byte(`{"grant_type":"authorization_code","code":"bench-code-1000000000000001",` +
		`"redirect_uri":"https://shop.example.com/stores/` + benchStoreID + `/auth/callback",` +
		`"code_verifier":"dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY","client_id":"webshop"}`)
	empties := []byte(`{"":0`)
	for i := 0; len(empties) < 64<<10-16; i++ {
		empties = strconv.AppendQuote(append(empties, ','), strconv.FormatInt(int64(i), 36))
		empties = append(empties, ":0"...)
	}
	empties = append(empties, '}')
	for _, bb := range []struct {
		name string
		body []byte
	}{{"usual", usual}, {"64KiB of short members", empties}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				var p tokenParams
				if terr := readTokenJSON(bb.body, &p); terr != nil {
					b.Fatal(terr.Description)
				}
			}
		})
	}
}
