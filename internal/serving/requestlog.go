package serving

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"
)

// RequestIDHeader carries a request's id: the client may send one, and
// every response carries the id its request was logged under.
const RequestIDHeader = "X-Request-Id"

// maxRequestID is the longest id a client may send that is kept.
const maxRequestID = 128

// RequestID is the id of a request that sent h as its X-Request-Id: h
// itself when it is 1 to 128 visible ASCII characters (0x21 to 0x7E), so
// that a caller's own id finds its request in the log; otherwise a new
// random one (128 bits, as 26 base32 characters).
func RequestID(h string) string {
	if validRequestID(h) {
		return h
	}
	return rand.Text()
}

func validRequestID(h string) bool {
	if len(h) == 0 || len(h) > maxRequestID {
		return false
	}
	for i := 0; i < len(h); i++ {
		if h[i] < 0x21 || h[i] > 0x7e {
			return false
		}
	}
	return true
}

// LogRequest writes the log line of one served request, both builds' (the
// contract's line a request): method, path (as LoggedPath shows it: never
// a segment that could be a secret), route, status, bytes written,
// duration in nanoseconds and request_id.
// The record is built here rather than by Logger.LogAttrs, which would
// also look up the caller for a source nobody logs.
func LogRequest(log *slog.Logger, r *http.Request, id, path, route string, status int, n int64, end time.Time, d time.Duration) {
	h := log.Handler()
	if !h.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(end, slog.LevelInfo, "request", 0)
	rec.AddAttrs(
		slog.String("method", r.Method),
		slog.String("path", path),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Int64("bytes", n),
		slog.Duration("duration", d),
		slog.String("request_id", id),
	)
	h.Handle(context.Background(), rec)
}
