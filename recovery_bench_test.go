package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"deeplink/internal/store/embedded"
)

// BenchmarkRecovery is the start after a crash with a million live codes:
// the real binary on a data_dir holding them, killed with SIGKILL, started
// again, timed from the start of the process to its first /readyz 200
// ("readyz-s"). Each iteration is one such restart. Run with -benchtime 3x.
func BenchmarkRecovery(b *testing.B) {
	const n = 1_000_000
	art, err := buildNative()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	data := filepath.Join(dir, "data")
	fillCodesDir(b, data, n)
	cfgFile := filepath.Join(dir, "config.json")
	cfg, err := json.Marshal(map[string]any{
		"max_live_entries": 2 * n,
		"stores": []map[string]any{{
			"id": benchStoreID, "name": "Bench store", "api_keys": []string{benchAPIKey},
			"redirect_domains": []string{"shop.example.com"},
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		b.Fatal(err)
	}
	addr, err := ctFreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		p, err := ctLaunch([]string{art.native, "-config", cfgFile, "-addr", addr, "-data", data}, filepath.Join(dir, "log"))
		if err != nil {
			b.Fatal(err)
		}
		err = p.waitReady("http://"+addr, time.Minute)
		total += time.Since(start)
		p.cmd.Process.Kill()
		<-p.exited
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "readyz-s")
}

// fillCodesDir writes n code records, shaped as registrations make them,
// into a store in dir and closes it: the files are then those a crash
// leaves, a snapshot and the journal after it.
func fillCodesDir(b *testing.B, dir string, n int) {
	s, err := embedded.Open(dir, embedded.Options{Durability: embedded.Interval})
	if err != nil {
		b.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				rec := benchRecord(uint64(i))
				key := codeKey(benchStoreID, fmt.Sprintf("recovery-%016d", i)).name()
				if err := s.Put(context.Background(), key, rec.appendTo(nil), exp); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}
