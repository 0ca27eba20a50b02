package main

import (
	"errors"
	"log/slog"
	"time"
)

// openRedis refuses: the edge module does not link the Redis client
// (wasip1 has no outgoing sockets), so the "redis" backend is the native
// build's alone for now.
func openRedis(*Config, *slog.Logger, func() time.Time) (appStore, error) {
	return nil, errors.New(`storage.backend: "redis" is not in the edge build yet; use "embedded", or the native binary`)
}
