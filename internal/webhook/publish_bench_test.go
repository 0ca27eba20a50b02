//go:build !wasip1

package webhook

// What a publish costs on Redis without the service around it: the
// ceiling under BenchmarkReplicaWebhooks's one-events/s (bench/README.md).
//
//	go test -run '^$' -bench PublishRedis -benchtime 20000x ./internal/webhook

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"deeplink/internal/store/redisstore"
	"deeplink/internal/store/redisstore/redistest"
)

// BenchmarkPublishRedis publishes events to a store of five endpoints
// from 16 goroutines (BenchmarkReplicaWebhooks's publishers), through
// records on Redis with appendfsync always, and reports events/s.
func BenchmarkPublishRedis(b *testing.B) {
	rd := redistest.New(b, redistest.Persistent...)
	st, err := redisstore.Open(redisstore.Options{URL: rd.URL(), Prefix: "bench:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	r := &records{st: st, now: time.Now, budget: &budgets{Pending: 1 << 40, Idem: idemBudget, Log: logBudget}}
	ctx := context.Background()
	for range MaxEndpointsPerStore {
		if err := r.createEndpoint(ctx, newTestEndpoint()); err != nil {
			b.Fatal(err)
		}
	}
	obj := json.RawMessage(`{"id":"ord_1234567890","status":"completed","amount":4999,"currency":"USD","items":[{"sku":"gems_500","quantity":1}]}`)
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.publish(ctx, testStore, EventOrderStatus, obj, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
