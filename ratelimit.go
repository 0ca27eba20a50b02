package main

import (
	"context"
	"math"
	"strconv"

	"deeplink/internal/store"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A client may fail a store's API key check keyFailBurst times in a row, then
// once per keyFailInterval: a guesser gets one try a second, a client with
// a misconfigured key notices long before it is throttled.
// guardPrefix starts the store keys of the guards' shared verdicts.
const guardPrefix = "guard:"

const (
	keyFailBurst    = 100
	keyFailInterval = time.Second
)

// A client address may likewise have grantFailBurst
// redemptions answered invalid_grant, then one per grantFailInterval: a
// webshop's backend, which redeems for all its players from one address,
// fails far more rarely than that (a reloaded callback page, a player
// back after the code's TTL), while a guesser of codes gets one try a
// second. Redemptions that succeed never spend it, and are never held up.
const (
	grantFailBurst    = 100
	grantFailInterval = time.Second
)

// keyGuard slows down guessing API keys: each client address may fail
// authentication of one store a burst of times, then once per interval;
// past that its requests to that store's API-key endpoints answer 429
// rate_limited with Retry-After, whatever key they carry, until the
// budget refills. Clients that send a right key never spend any of it.
//
// A budget is of an address and a store (guardKey), not of an address
// alone: a guesser behind a NAT or an untrusted proxy then throttles, at
// that address, only the store it guesses at, not every studio sharing
// the address. The right key of that one store is throttled with it, on
// purpose: were a right key let through before the budget is looked at,
// a throttled guesser would still learn, at full speed, which of its
// guesses is right, and the guard would slow nothing.
//
// Processes that share a store (replicas on Redis, the edge host's
// instances) share the verdict (share): a client blocked by one is
// blocked by each of the others from its first failure there, so that a
// guesser spreading its guesses gains one each, not a budget each. Only
// the verdict is written, when a client becomes blocked, not every
// failure: a failed key costs the store nothing until a client has spent
// its burst.
type keyGuard struct {
	burst    float64
	interval time.Duration

	st     store.Store // where the verdicts are shared; nil: this process alone
	prefix string      // of the verdicts' keys in st

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

// guardKey names the budget of the client at address client for the
// store whose configured id is storeID ("" for a store id that names
// none, so that inventing ids buys no fresh budgets).
func guardKey(client, storeID string) string { return client + " " + storeID }

// clientAddr is the address a budget belongs to: the peer's IP, or, when
// the peer is one of the trusted proxies, the client their
// X-Forwarded-For names: the last address in it that is not a trusted
// proxy's (those before it are the client's to write, and could be
// forged). Behind a proxy, every client would otherwise share its
// address, and one guessing keys would lock out all the others. An IPv6
// client is counted by its /64 (budgetKey).
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	client := budgetKey(peer)
	if !isTrusted(peer, trusted) {
		return client
	}
	forwarded := r.Header.Values("X-Forwarded-For")
	for i := len(forwarded) - 1; i >= 0; i-- {
		// From the right, without splitting: the walk usually stops at the
		// last hop, and the header may be 64 KiB of commas.
		for line := forwarded[i]; line != ""; {
			var hop string
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				line, hop = line[:j], line[j+1:]
			} else {
				line, hop = "", line
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue // "a, , b" and a trailing comma
			}
			a, ok := parseHop(hop)
			if !ok {
				return client // garbage: the last address known good
			}
			client = budgetKey(a)
			if !isTrusted(a, trusted) {
				return client
			}
		}
	}
	return client
}

// budgetKey names the budget of a client at a: its IPv4 address, or its
// IPv6 /64, the block one subscriber gets, which would otherwise give a
// guesser 2^64 fresh budgets.
func budgetKey(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// parseHop reads one X-Forwarded-For element as proxies write them: an
// address, with a port or not, IPv6 in brackets or not, quoted or not.
// (isTrusted and budgetKey unmap what it returns, as they do the peer.)
func parseHop(hop string) (netip.Addr, bool) {
	hop = strings.Trim(hop, `"`)
	if ap, err := netip.ParseAddrPort(hop); err == nil {
		return ap.Addr(), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(hop, "["), "]"))
	return a, err == nil
}

// isTrusted reports whether a is in one of the trusted prefixes, which
// hold unmapped addresses without zones (Config.validate).
func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	a = a.Unmap().WithZone("")
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
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

// anyFailing reports whether some client has spent part of its budget,
// so that blocked may say yes to someone.
func (g *keyGuard) anyFailing() bool { return g.failing.Load() > 0 }

// share makes g's verdicts hold across the processes on st, under keys
// starting with prefix.
func (g *keyGuard) share(st store.Store, prefix string) { g.st, g.prefix = st, prefix }

// failed spends one of client's failures. With a shared store, a client
// this failure blocks is blocked there too, until it may fail once more;
// one blocked there already is blocked here from now on. A store that
// fails leaves the verdict this process's own.
func (g *keyGuard) failed(ctx context.Context, client string, now time.Time) {
	g.mu.Lock()
	b := g.clients[client]
	if b == nil {
		b = &failBudget{left: g.burst, at: now}
		g.clients[client] = b
		g.failing.Store(int64(len(g.clients)))
	}
	g.refillLocked(b, now)
	b.left = math.Max(0, b.left-1)
	left := b.left
	g.mu.Unlock()
	if g.st == nil {
		return
	}
	key := g.prefix + client
	if left < 1 {
		until := now.Add(time.Duration((1 - left) * float64(g.interval)))
		g.st.Put(ctx, key, strconv.AppendInt(nil, until.UnixNano(), 10), until)
		return
	}
	v, err := g.st.Get(ctx, key)
	if err != nil {
		return // not blocked elsewhere
	}
	until, err := strconv.ParseInt(string(v), 10, 64)
	if wait := time.Unix(0, until).Sub(now); err == nil && wait > 0 {
		g.mu.Lock()
		if b := g.clients[client]; b != nil {
			g.refillLocked(b, now)
			b.left = math.Min(b.left, 1-float64(wait)/float64(g.interval)) // blocked until then
		}
		g.mu.Unlock()
	}
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
