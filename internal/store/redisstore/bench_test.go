//go:build !wasip1

package redisstore

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/store/redisstore/redistest"
)

// BenchmarkInsertTake is an auth code's life on each backend in one run:
// registered (Insert of a 37-byte key and a 190-byte value for five
// minutes) and redeemed (Take), 32 at once on two Ps. Redis with
// appendfsync always is set against the embedded store with "fsync" (both
// acknowledge a change once it is on disk), everysec against "interval".
// cpu-ns/op is the CPU of this process and of redis-server, if any, for
// a code: on a shared host it moves less than wall time does.
func BenchmarkInsertTake(b *testing.B) {
	for _, tc := range []struct {
		name string
		open func(b *testing.B) (store.Store, *redistest.Server)
	}{
		{"embedded-fsync", openEmbedded(embedded.Fsync)},
		{"redis-always", openRedis("always")},
		{"embedded-interval", openEmbedded(embedded.Interval)},
		{"redis-everysec", openRedis("everysec")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, sv := tc.open(b)
			defer s.Close()
			val := make([]byte, 190)
			var seq atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			cpu0 := processCPU() + serverCPU(sv)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := fmt.Sprintf("auth:%032x", seq.Add(1))
					if err := s.Insert(ctx, k, val, time.Now().Add(5*time.Minute)); err != nil {
						b.Error(err)
						return
					}
					if _, err := s.Take(ctx, k); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu := processCPU() + serverCPU(sv) - cpu0
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time sv has used, as Linux counts it in
// /proc (in ticks of 10 ms); 0 for no server, or elsewhere.
func serverCPU(sv *redistest.Server) time.Duration {
	if sv == nil {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sv.Pid()))
	if err != nil {
		return 0
	}
	_, after, _ := strings.Cut(string(stat), ") ") // the name may hold spaces
	f := strings.Fields(after)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64) // fields 14 and 15 of the line
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func openEmbedded(d embedded.Durability) func(b *testing.B) (store.Store, *redistest.Server) {
	return func(b *testing.B) (store.Store, *redistest.Server) {
		db, err := embedded.Open(b.TempDir(), embedded.Options{Durability: d, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		return db, nil
	}
}

func openRedis(fsync string) func(b *testing.B) (store.Store, *redistest.Server) {
	return func(b *testing.B) (store.Store, *redistest.Server) {
		sv := redistest.New(b, "--appendonly", "yes", "--appendfsync", fsync)
		s, err := Open(Options{URL: sv.URL(), Prefix: "bench:", Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		return s, sv
	}
}
