//go:build !wasip1

package webhook

import (
	"io"
	"log/slog"
	"testing"

	"deeplink/internal/store/redisstore"
	"deeplink/internal/store/redisstore/redistest"
)

// TestEndpointCapRaceRedis is TestEndpointCapRace on Redis, where the
// replicas are processes of their own.
func TestEndpointCapRaceRedis(t *testing.T) {
	sv := redistest.New(t)
	st, err := redisstore.Open(redisstore.Options{URL: sv.URL(), Prefix: "test:", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	capRace(t, st)
}
