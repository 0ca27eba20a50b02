package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	fillStore(b, data, n, func(i int) (string, []byte) { // shaped as registrations make them
		rec := benchRecord(uint64(i))
		return codeKey(benchStoreID, fmt.Sprintf("recovery-%016d", i)).name(), rec.appendTo(nil)
	})
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
