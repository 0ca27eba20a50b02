package main

import (
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A client may fail the API key check keyFailBurst times in a row, then
// once per keyFailInterval: a guesser gets one try a second, a client with
// a misconfigured key notices long before it is throttled.
const (
	keyFailBurst    = 100
	keyFailInterval = time.Second
)

// keyGuard slows down guessing API keys: each client address may fail
// authentication a burst of times, then once per interval; past that its
// requests to API-key endpoints answer 429 rate_limited with Retry-After,
// whatever key they carry, until the budget refills. Clients that send a
// right key never spend any of it; only one that shares its address (a
// NAT, a proxy) with a guesser can be throttled.
type keyGuard struct {
	burst    float64
	interval time.Duration

	// failing is len(clients), kept beside it so that blocked, on every
	// request with an API key, takes no lock while nobody has failed.
	failing atomic.Int64

	mu      sync.Mutex // guards the field below, and writes of failing
	clients map[string]*failBudget
}

type failBudget struct {
	left float64   // failures still allowed
	at   time.Time // when left was computed
}

func newKeyGuard(burst int, interval time.Duration) *keyGuard {
	return &keyGuard{burst: float64(burst), interval: interval, clients: map[string]*failBudget{}}
}

// clientAddr is the address a budget belongs to: the peer's IP.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refillLocked brings b up to now. g.mu must be held.
func (g *keyGuard) refillLocked(b *failBudget, now time.Time) {
	b.left = math.Min(g.burst, b.left+float64(now.Sub(b.at))/float64(g.interval))
	b.at = now
}

// blocked reports whether client has no failures left, and when it will
// have one again. It reads the clock, now, only for a client that failed.
func (g *keyGuard) blocked(client string, now func() time.Time) (bool, time.Duration) {
	if g.failing.Load() == 0 {
		return false, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.clients[client]
	if b == nil {
		return false, 0
	}
	g.refillLocked(b, now())
	if b.left >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - b.left) * float64(g.interval))
}

// failed spends one of client's failures.
func (g *keyGuard) failed(client string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.clients[client]
	if b == nil {
		b = &failBudget{left: g.burst, at: now}
		g.clients[client] = b
		g.failing.Store(int64(len(g.clients)))
	}
	g.refillLocked(b, now)
	b.left = math.Max(0, b.left-1)
}

// sweep forgets clients whose budget is full again.
func (g *keyGuard) sweep(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for c, b := range g.clients {
		if g.refillLocked(b, now); b.left >= g.burst {
			delete(g.clients, c)
		}
	}
	g.failing.Store(int64(len(g.clients)))
}
