package embedded

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fill puts n entries shaped as the service's auth codes (a 37-byte key,
// a 190-byte value) into db from 64 goroutines, so their fsyncs are shared.
func fill(b *testing.B, db *DB, n int) {
	val := make([]byte, 190)
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				key := fmt.Sprintf("auth:%032x", i)[:37]
				if err := db.Put(context.Background(), key, val, exp); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMillionCodes fills a store with a million code-shaped entries
// and reports the heap each takes ("heap-B/code"), and how long a start
// takes to read them back after a crash ("crash-restart-s": the newest
// snapshot and the journal after it) and after a graceful stop
// ("clean-restart-s": one snapshot). Run with -benchtime 1x.
func BenchmarkMillionCodes(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		dir := b.TempDir()
		before := heapInUse()
		db, err := Open(dir, Options{Durability: Interval}) // the same files, written faster
		if err != nil {
			b.Fatal(err)
		}
		fill(b, db, n)
		b.ReportMetric(float64(heapInUse()-before)/n, "heap-B/code")
		if err := db.Sync(); err != nil {
			b.Fatal(err)
		}
		db.abandon()

		start := time.Now()
		db, err = Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "crash-restart-s")
		if db.Len() != n {
			b.Fatalf("%d entries after the restart; want %d", db.Len(), n)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		db, err = Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "clean-restart-s")
		db.Close()
	}
}

// BenchmarkPut is a change acknowledged under each durability, 32 at once
// on two Ps: with fsync, what group commit makes of an fsync.
func BenchmarkPut(b *testing.B) {
	for _, d := range []Durability{Fsync, Interval} {
		b.Run(string(d), func(b *testing.B) {
			db, err := Open(b.TempDir(), Options{Durability: d})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			val := make([]byte, 190)
			var seq sync.Mutex
			i := 0
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					seq.Lock()
					i++
					k := fmt.Sprintf("auth:%032x", i)
					seq.Unlock()
					if err := db.Put(context.Background(), k, val, time.Time{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
