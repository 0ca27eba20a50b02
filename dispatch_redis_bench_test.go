//go:build !wasip1

package main

import (
	"io"
	"log/slog"
	"testing"

	"deeplink/internal/store/redisstore/redistest"
)

// BenchmarkDeliveryRedisRatio runs the webhook dispatch benchmark's
// service (publish, written, to delivered) on Redis (appendfsync always)
// and on the embedded store (durability fsync) alternately, as
// BenchmarkDeliveryRatio runs the service and its yardstick, and reports
// Redis's deliveries per second as a ratio of the embedded store's (issue
// 22: at least 0.5).
func BenchmarkDeliveryRedisRatio(b *testing.B) {
	rd := redistest.New(b, redistest.Persistent...)
	embedded := newDeliveryBench(b)
	cfg := benchConfig(b, benchStores)
	cfg.Storage.Backend, cfg.Storage.RedisURL, cfg.Storage.RedisPrefix = "redis", rd.URL(), "bench:"
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	onRedis := &deliveryBench{a: a, rc: newBenchReceiver(b)}
	benchAddEndpoints(b, a.srv.hooks, benchEndpoints, onRedis.rc.URL+"/hooks")
	embedded.run(b, benchWarm)
	onRedis.run(b, benchWarm)
	alternate(b, &benchSide{name: "redis", run: onRedis.run}, &benchSide{name: "embedded", run: embedded.run})
}
