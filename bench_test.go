package main

// Performance checks. None of these run under `go test` without -bench; see
// bench/run.sh for the end-to-end load test against a yardstick server.
//
//	go test -run='^$' -bench='Register|StoreInsert|StoreConsume' -benchtime=2s ./
//	go test -run='^$' -bench=StoreMillionCodes -benchtime=1x ./

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	benchStoreID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	benchAPIKey  = "ak_demo_not_secret_do_not_deploy"
)

// BenchmarkRegister drives the whole handler (routing, logging, metrics,
// validation, store) with unique, valid registrations from every P.
func BenchmarkRegister(b *testing.B) { benchmarkRegister(b, 0) }

// BenchmarkRegisterFullStore is BenchmarkRegister with a million codes
// live.
func BenchmarkRegisterFullStore(b *testing.B) { benchmarkRegister(b, 1_000_000) }

// newBenchApp starts the service on the demo configuration, its data in
// a temporary directory, logging nowhere; the benchmark's cleanup closes
// it.
func newBenchApp(b *testing.B) *app {
	cfg, err := ParseConfig(demoConfig)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	// The default cap (2 M) could be reached by a long -benchtime; a 503
	// would then fail the benchmark for a reason that is not its subject.
	cfg.MaxLiveEntries = 1 << 30
	a, err := newApp(cfg, newLogger(io.Discard), true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return a
}

// benchmarkRegister registers codes in parallel through the service's
// handler, with live codes already in the store.
func benchmarkRegister(b *testing.B, live int) {
	a := newBenchApp(b)
	if live > 0 {
		rec := benchRecord(0)
		v := rec.appendTo(nil)
		exp := time.Now().Add(time.Hour)
		for j := range uint64(live) {
			if err := a.store.Insert(codeKey(benchStoreID, fmt.Sprintf("live-%016d", j)), v, exp); err != nil {
				b.Fatal(err)
			}
		}
		if err := a.store.Flush(); err != nil { // not the ticker's work during the benchmark
			b.Fatal(err)
		}
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

	var seq atomic.Uint64
	b.ReportAllocs()
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

// BenchmarkRedeem exchanges registered codes at the token endpoint as the
// service does ("synced": what the redemption changed is on disk before
// it is answered, memStore.Sync) and with the store left to write it
// within the second ("memory"), side by side: the difference is what
// durability costs a sign-in. "alone" is one redemption at a time, its
// latency; "32" is 32 at once on two Ps, as bench/run.sh's connections,
// whose ns/op is the inverse of the throughput.
func BenchmarkRedeem(b *testing.B) {
	for _, synced := range []bool{true, false} {
		for _, par := range []int{0, 16} {
			name := map[bool]string{true: "synced", false: "memory"}[synced] + map[int]string{0: "/alone", 16: "/32"}[par]
			b.Run(name, func(b *testing.B) { benchmarkRedeem(b, synced, par) })
		}
	}
}

// benchmarkRedeem is BenchmarkRedeem, with par redemptions at once per P
// (RunParallel), or one at a time if 0.
func benchmarkRedeem(b *testing.B, synced bool, par int) {
	a := newBenchApp(b)
	if !synced {
		a.srv.sync = func(...Key) error { return nil }
	}
	const verifier = "dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY"
	rec := benchRecord(0)
	rec.CodeChallenge = s256(verifier)
	v := rec.appendTo(nil)
	exp := time.Now().Add(time.Hour)
	for i := range b.N {
		if err := a.store.Insert(codeKey(benchStoreID, fmt.Sprintf("bench-code-%016d", i)), v, exp); err != nil {
			b.Fatal(err)
		}
	}
	if err := a.store.Flush(); err != nil {
		b.Fatal(err)
	}
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

// benchKey returns a well-spread key for n without hashing cost, so the
// store benchmarks measure the store and not SHA-256.
func benchKey(n uint64) (k Key) {
	for i := 0; i < len(k); i += 8 {
		n += 0x9e3779b97f4a7c15 // splitmix64
		z := n
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		for j := 0; j < 8; j++ {
			k[i+j] = byte(z >> (8 * j))
		}
	}
	return k
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

// newBenchStore returns a store with nothing on disk and room for any
// benchmark.
func newBenchStore(b *testing.B) *memStore {
	b.Helper()
	s, err := newMemStore("", 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStoreInsert inserts fresh keys from every P.
func BenchmarkStoreInsert(b *testing.B) {
	s := newBenchStore(b)
	rec := benchRecord(1)
	val := rec.appendTo(nil) // values are never mutated, so one can back every entry
	exp := time.Now().Add(time.Hour)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { reportCPU(b, processCPU()-cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Insert(benchKey(seq.Add(1)), val, exp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStorePrefetch is memStore.Prefetch at work: lookups of the
// codes of a store holding a million, whose table slots are rarely cached,
// each after some other work of a registration (encoding its record,
// hashing its code), with and without a Prefetch of the key before that
// work. (Lookups, as inserts would grow the store and measure its growth:
// both start at the same slot.)
func BenchmarkStorePrefetch(b *testing.B) {
	s := newBenchStore(b)
	rec := benchRecord(1)
	val := rec.appendTo(nil)
	exp := time.Now().Add(time.Hour)
	const live = 1 << 20
	for i := range uint64(live) {
		if err := s.Insert(benchKey(i), val, exp); err != nil {
			b.Fatal(err)
		}
	}
	// With the prefetch first: the first to run may find more of the
	// table cached, from the fill, which favours the plain lookups.
	for _, prefetch := range []bool{true, false} {
		b.Run(fmt.Sprint("prefetch=", prefetch), func(b *testing.B) {
			buf := make([]byte, 0, 512)
			for i := range uint64(b.N) {
				k := benchKey(i * 0x9e3779b1 % live) // in no particular order
				if prefetch {
					s.Prefetch(k)
				}
				buf = rec.appendTo(buf[:0])
				_ = codeKey(rec.Player.ClientReferenceID, rec.RedirectURI)
				if _, ok := s.Get(k); !ok {
					b.Fatal("a live code was not found")
				}
			}
		})
	}
}

// BenchmarkStoreConsume is the life of a code in the store: inserted, then
// swapped for its redeemed marker, as registration and redemption do.
func BenchmarkStoreConsume(b *testing.B) {
	s := newBenchStore(b)
	rec := benchRecord(1)
	val := rec.appendTo(nil)
	redeemed := redeemedValue(benchKey(0))
	exp := time.Now().Add(time.Hour)
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	defer func() { reportCPU(b, processCPU()-cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := benchKey(seq.Add(1))
			if err := s.Insert(k, val, exp); err != nil {
				b.Fatal(err)
			}
			if old, ok := s.Swap(k, redeemed, time.Time{}); !ok || len(old) != len(val) {
				b.Fatal("swap did not find the code just inserted")
			}
		}
	})
}

// BenchmarkStoreMillionCodes fills a store with a million live codes, each
// with its own encoded value as the handler would make it, and reports the
// live heap they hold per code (target: ≤ 512 B/code, record.go). It also
// reports the parts: the encoded value's length and the rest (the value's
// size-class rounding plus the map's slots and control words).
func BenchmarkStoreMillionCodes(b *testing.B) {
	const n = 1_000_000
	b.ReportAllocs()
	var perCode, valLen float64
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)

		s, err := newMemStore("", n)
		if err != nil {
			b.Fatal(err)
		}
		exp := time.Now().Add(time.Hour)
		var vals int
		for j := uint64(0); j < n; j++ {
			rec := benchRecord(j)
			v := rec.appendTo(nil)
			vals += len(v)
			if err := s.Insert(codeKey(benchStoreID, fmt.Sprintf("code-%016d", j)), v, exp); err != nil {
				b.Fatal(err)
			}
		}

		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("store holds %d codes, want %d", s.Len(), n)
		}
		runtime.KeepAlive(s)
		perCode = float64(after.HeapAlloc-before.HeapAlloc) / n
		valLen = float64(vals) / n
	}
	b.ReportMetric(perCode, "B/code")
	b.ReportMetric(valLen, "value-B/code")
	if perCode > 512 {
		b.Errorf("%.0f B/code, over the 512 B/code budget", perCode)
	}
}

// BenchmarkStoreSweep is the ticker's sweep of a store filling up: a
// million live codes, none expired yet, and the sweep at every tick
// has nothing to remove.
func BenchmarkStoreSweep(b *testing.B) {
	s := newBenchStore(b)
	exp := time.Now().Add(time.Hour)
	rec := benchRecord(0)
	v := rec.appendTo(nil)
	for j := range uint64(1_000_000) {
		if err := s.Insert(codeKey(benchStoreID, fmt.Sprintf("code-%016d", j)), v, exp); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now()
	for b.Loop() {
		s.Sweep(now)
	}
	if s.Len() != 1_000_000 {
		b.Fatalf("store holds %d codes after the sweeps, want 1000000", s.Len())
	}
}

// BenchmarkStoreSweepExpiring is the sweep at steady state: a million
// live codes expiring over five minutes, each tick a 300th of them
// expiring and as many new ones registered: every shard has something
// due every second. An op is one tick's sweep (the inserts are not
// timed).
func BenchmarkStoreSweepExpiring(b *testing.B) {
	const live, ttl = 1_000_000, 300
	s := newBenchStore(b)
	base := time.Now().Add(time.Hour) // Insert takes entries expiring in the past for gone
	rec := benchRecord(0)
	v := rec.appendTo(nil)
	var n uint64
	insert := func(exp time.Time) {
		if err := s.Insert(codeKey(benchStoreID, fmt.Sprintf("code-%016d", n)), v, exp); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for j := range live {
		insert(base.Add(time.Duration(j%ttl+1) * time.Second))
	}
	tick := 0
	for b.Loop() {
		tick++
		now := base.Add(time.Duration(tick) * time.Second)
		s.Sweep(now)
		b.StopTimer()
		for range live / ttl {
			insert(now.Add(ttl * time.Second))
		}
		b.StartTimer()
	}
	if got := s.Len(); got < live*99/100 || got > live*101/100 {
		b.Fatalf("store holds %d codes, want about %d", got, live)
	}
}

// BenchmarkStoreFlush is the snapshot the store's ticker writes every
// second while codes are being registered: 100,000 live codes, one new code
// in every shard, then Flush. Flush rewrites each dirty shard whole, so
// under steady traffic every tick writes (and fsyncs) the entire store:
// the B/s figure is what one tick writes.
func BenchmarkStoreFlush(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	s, err := newMemStore(dir, 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	for j := uint64(0); j < n; j++ {
		rec := benchRecord(j)
		if err := s.Insert(benchKey(j), rec.appendTo(nil), exp); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	var size int64
	files, _ := filepath.Glob(filepath.Join(dir, "store-*.snap"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			size += fi.Size()
		}
	}
	b.SetBytes(size)
	rec := benchRecord(0)
	val := rec.appendTo(nil)
	next := uint64(n)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		// One new code in each shard makes every shard dirty, as a second
		// of traffic at any real rate does.
		for hit := [numShards]bool{}; ; {
			k := benchKey(next)
			next++
			if hit[k[0]%numShards] {
				continue
			}
			hit[k[0]%numShards] = true
			if err := s.Insert(k, val, exp); err != nil {
				b.Fatal(err)
			}
			if s.Len() >= n+(i+1)*numShards {
				break
			}
		}
		if err := s.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, processCPU()-cpu0)
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
// worst a client without any key may send, 64 KiB of empty members.
func BenchmarkTokenJSON(b *testing.B) {
	usual := []byte(`{"grant_type":"authorization_code","code":"bench-code-1000000000000001",` +
		`"redirect_uri":"https://shop.example.com/stores/` + benchStoreID + `/auth/callback",` +
		`"code_verifier":"dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY","client_id":"webshop"}`)
	empties := []byte(`{` + strings.Repeat(`"":"",`, (64<<10)/6-1) + `"":""}`)
	for _, bb := range []struct {
		name string
		body []byte
	}{{"usual", usual}, {"64KiB of empty members", empties}} {
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
