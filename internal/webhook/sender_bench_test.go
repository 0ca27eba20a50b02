//go:build !wasip1

package webhook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/store/embedded"
)

// BenchmarkSender: b.N deliveries queued to 2 × 4 endpoints at a local
// receiver that answers 200 at once, sent by one sender of 32 workers on
// the embedded store with durability fsync; it reports deliveries per
// second and the process's CPU per delivery.
//
//	go test -run '^$' -bench Sender -benchtime 5000x ./internal/webhook
func BenchmarkSender(b *testing.B) {
	db, err := embedded.Open(b.TempDir(), embedded.Options{Durability: embedded.Durability(os.Getenv("BENCH_DURABILITY")), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var got atomic.Int64
	done := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if got.Add(1) == int64(b.N) {
			close(done)
		}
	}))
	defer rc.Close()
	t := &testing.T{}
	var eps []string
	for i := range 8 {
		ep := fmt.Sprint("we_", i)
		putEndpoint(t, db, ep, rc.URL)
		eps = append(eps, ep)
	}
	for i := range b.N {
		putDelivery(t, db, eps[i%len(eps)], time.Now())
	}
	client, _ := egress.NewClient(egress.Options{Timeout: 10 * time.Second, AllowPrivate: true, MaxIdleConnsPerHost: 32})
	s := newSender(db, senderConfig(), client, 32, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	cpu0 := processCPU()
	b.ResetTimer()
	go s.run(ctx)
	<-done
	b.StopTimer()
	cancel()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/delivery")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
