//go:build !wasip1

// Package redisstore is the store of several replicas: all state in one
// Redis (6.2 or later), every key under a prefix, reached through the
// go-redis client.
//
// Each method but Apply is one Redis command, or one Lua script where a
// change reads before it writes (CompareAndSwap, Extend, Add, ZClaim), so
// each is atomic on the server whichever replica calls it: Take is one
// GETDEL, Insert one SET NX, Swap one SET XX GET.
//
// Durability is Redis's own persistence, configured on the server, not
// here: a method returns nil once Redis has acknowledged the change, and
// what that acknowledgement is worth is what the server was told. With
// "appendonly yes" and "appendfsync always" Redis writes and fsyncs the
// append-only file before it answers, so an acknowledged change survives
// kill -9 and a power cut, as the embedded backend's "fsync" does; with
// "appendfsync everysec" a crash of Redis's host can lose the last second
// of acknowledged changes; with no persistence a restart of Redis loses
// everything.
//
// Expiry: a caller's exp is an absolute time on its clock (Options.Now);
// the store sends Redis the time left, exp − Now(), in milliseconds
// rounded up (SET PX, PEXPIRE), and from then on Redis's own clock counts
// it down and Redis removes the key when it runs out. So replicas whose
// clocks disagree with Redis's (or with each other) by seconds still
// agree on how long an entry lives; what they need is clocks that run at
// the same rate. An exp that has passed already deletes the key, or
// leaves nothing, as a live entry would have expired at once.
//
// Keys: an entry lives at Prefix+"k:"+key, a sorted set at
// Prefix+"z:"+set, so that an entry and a set may share a name as they do
// in the embedded store. Set scores are Redis's doubles: integers are
// exact up to 2^53 in magnitude (Unix milliseconds are far below it), and
// ZAdd and ZClaim refuse a score beyond that rather than round it.
//
// Budget: store.ErrFull is Redis refusing a write over its maxmemory
// (with maxmemory-policy noeviction, the only policy under which Redis
// does not drop live state by itself).
//
// Errors: a connection that cannot be made, a timeout, a closed store and
// a server that cannot serve now (loading, a replica, persistence failing)
// wrap store.ErrUnavailable together with the cause; the client does not
// retry a command (see Options), and reconnects by itself once Redis is
// back.
package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"deeplink/internal/store"
)

// The defaults of Options, each with the reason for its value.
const (
	// DefaultPoolSize: each call in flight holds one connection for one
	// round trip. With appendfsync always Redis answers all the commands
	// it read in one turn of its loop after one fsync, so the calls in
	// flight at once are what shares an fsync, as the embedded store's
	// group commit does; 64 keeps a replica's burst of requests from
	// queueing for a connection, and many replicas at 64 stay far under
	// Redis's default maxclients of 10 000.
	DefaultPoolSize = 64
	// DefaultDialTimeout: a connection to a Redis on the same network is
	// made in well under a millisecond; one that takes a second is a host
	// down or a packet dropped, and the request should answer 503 now
	// rather than wait on it.
	DefaultDialTimeout = time.Second
	// DefaultReadTimeout: every command here is O(1) or O(log n) on the
	// server, but under appendfsync always its answer waits for an fsync,
	// which a busy disk can stretch to hundreds of milliseconds; 2 s is
	// past that, and well inside the time a client or load balancer
	// waits for the 503 that a timeout turns into.
	DefaultReadTimeout = 2 * time.Second
	// DefaultWriteTimeout: a command is written into the socket's buffer
	// at once; a write that blocks means Redis stopped reading, the same
	// failure as a read that does not come back.
	DefaultWriteTimeout = 2 * time.Second
	// DefaultPoolTimeout: how long a call waits for a free connection
	// when all DefaultPoolSize are busy; as long as one slow answer, so
	// that a burst waits its turn but a stalled Redis answers 503.
	DefaultPoolTimeout = 2 * time.Second
)

// Options configure Open.
type Options struct {
	// URL is where Redis is: redis://[[user]:password@]host:port/db,
	// rediss:// for TLS, or unix:///path/to/socket?db=N. Pool and
	// timeout parameters in the URL are overridden by the fields below
	// (by their defaults when zero).
	URL string
	// Prefix starts every key the store writes (storage.redis_prefix), so
	// that one Redis can hold several deployments.
	Prefix string
	// Now is the clock of the callers' expiry times; time.Now when nil.
	// It only turns an exp into a time left (see the package doc): Redis's
	// clock decides when that runs out.
	Now func() time.Time
	// Logger gets the client's own warnings (a dial that failed, say);
	// slog.Default when nil. go-redis has one logger for the process: the
	// last Open's Logger gets them all.
	Logger *slog.Logger

	// The connection pool and its timeouts; zero takes the Default
	// constants above.
	PoolSize     int
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolTimeout  time.Duration
}

// Store is the Redis store. It implements store.Store.
type Store struct {
	rdb    *redis.Client
	prefix string
	now    func() time.Time
	closed atomic.Bool
}

var _ store.Store = (*Store)(nil)

// Open makes a store on the Redis at o.URL. It does not connect: a Redis
// that is down fails the calls made until it is up (ErrUnavailable), not
// Open; Ping checks it. A URL that cannot be read fails Open.
func Open(o Options) (*Store, error) {
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("redis_url: %w", err)
	}
	ro.PoolSize = cmp.Or(o.PoolSize, DefaultPoolSize)
	ro.DialTimeout = cmp.Or(o.DialTimeout, DefaultDialTimeout)
	ro.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	ro.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	ro.PoolTimeout = cmp.Or(o.PoolTimeout, DefaultPoolTimeout)
	// A caller's deadline is the one that counts when it is shorter.
	ro.ContextTimeoutEnabled = true
	// No command is retried: most are not idempotent (Add, Take, Swap,
	// ZClaim), and a retry after an answer lost on the way back would
	// apply them twice. The caller gets ErrUnavailable, for which the
	// contract promises nothing either way.
	ro.MaxRetries = -1
	// One dial a call: dialing again behind a refused connection only
	// delays the 503; the pool probes a Redis that is down by itself.
	ro.DialerRetries = 1
	// Pipelines (Apply) share the pool above instead of a second one.
	ro.PipelinePoolSize = -1
	ro.OnConnect = checkVersion
	setLogger(cmp.Or(o.Logger, slog.Default()))
	s := &Store{rdb: redis.NewClient(ro), prefix: o.Prefix, now: o.Now}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// clientLog is where go-redis's messages go: set once for the process,
// it forwards them to the logger of the last Open.
var clientLog struct {
	once sync.Once
	to   atomic.Pointer[slog.Logger]
}

func setLogger(l *slog.Logger) {
	clientLog.to.Store(l)
	clientLog.once.Do(func() { redis.SetLogger(forward{}) })
}

type forward struct{}

func (forward) Printf(ctx context.Context, format string, v ...any) {
	clientLog.to.Load().WarnContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// checkVersion refuses a connection to a Redis older than 6.2, whose
// missing commands (GETDEL, SET … GET) would otherwise fail call by call.
func checkVersion(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	return versionError(info)
}

// versionError reads the version in INFO's text and says what is wrong
// with it; nil for 6.2 and later, and for a server that does not say.
func versionError(info string) error {
	for line := range strings.SplitSeq(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, rest, _ := strings.Cut(v, ".")
		minor, _, _ := strings.Cut(rest, ".")
		ma, err1 := strconv.Atoi(major)
		mi, err2 := strconv.Atoi(minor)
		if err1 != nil || err2 != nil {
			return nil
		}
		if ma < 6 || ma == 6 && mi < 2 {
			return fmt.Errorf("redis %s is older than 6.2, which this store needs", v)
		}
		return nil
	}
	return nil
}

// Ping checks that Redis answers, for a readiness probe.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.fail("ping", s.rdb.Ping(ctx).Err())
}

// Close releases the connections. Every change acknowledged is already as
// durable as Redis's persistence makes it, so nothing is left to write.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.rdb.Close()
}

func (s *Store) open() error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %w: closed", store.ErrUnavailable)
	}
	return nil
}

func (s *Store) key(k string) string { return s.prefix + "k:" + k }
func (s *Store) set(k string) string { return s.prefix + "z:" + k }

// forever and expired are the times left that ttl returns for an entry
// that never expires and for one whose expiry has passed.
const (
	forever = -1
	expired = 0
)

// ttl is the time left until exp in milliseconds, rounded up so that no
// entry goes before its time: forever for the zero exp, expired (0) when
// exp is not after Now().
func (s *Store) ttl(exp time.Time) int64 {
	if exp.IsZero() {
		return forever
	}
	d := exp.Sub(s.now())
	if d <= 0 {
		return expired
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fail turns a client's error into the contract's: the server's own
// error answers stay themselves (a bug or a misuse), but OOM is ErrFull,
// and everything that says "not now" is ErrUnavailable with its cause.
func (s *Store) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var re redis.Error
	switch {
	case redis.IsOOMError(err):
		return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrFull, err)
	case errors.As(err, &re) && !unavailable(err):
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
}

// unavailable reports whether a server's error answer says it cannot
// serve now (rather than that the command was wrong).
func unavailable(err error) bool {
	// HasErrorPrefix looks past an answer's "ERR ": "ERR max number of
	// clients reached" is matched by its words.
	for _, p := range []string{"LOADING", "MISCONF", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "max number of clients"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	v, err := s.rdb.Get(ctx, s.key(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, store.ErrNotFound
	}
	return v, s.fail("get", err)
}

// GetMany is one MGET.
func (s *Store) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.key(k)
	}
	vs, err := s.rdb.MGet(ctx, full...).Result()
	if err != nil {
		return nil, s.fail("getmany", err)
	}
	out := make([][]byte, len(keys))
	for i, v := range vs {
		if str, ok := v.(string); ok {
			out[i] = []byte(str)
		}
	}
	return out, nil
}

// setArgs is the SET command putting val at key for ms (forever: no
// expiry), with the options opts before the expiry.
func (s *Store) setArgs(key string, val []byte, ms int64, opts ...any) []any {
	args := append([]any{"set", s.key(key), val}, opts...)
	if ms != forever {
		args = append(args, "px", ms)
	}
	return args
}

func (s *Store) Put(ctx context.Context, key string, val []byte, exp time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	ms := s.ttl(exp)
	if ms == expired {
		return s.fail("put", s.rdb.Del(ctx, s.key(key)).Err())
	}
	return s.fail("put", s.rdb.Do(ctx, s.setArgs(key, val, ms)...).Err())
}

func (s *Store) Insert(ctx context.Context, key string, val []byte, exp time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	ms := s.ttl(exp)
	if ms == expired { // nothing would be kept: only the answer matters
		n, err := s.rdb.Exists(ctx, s.key(key)).Result()
		if err == nil && n > 0 {
			return store.ErrExists
		}
		return s.fail("insert", err)
	}
	err := s.rdb.Do(ctx, s.setArgs(key, val, ms, "nx")...).Err()
	if errors.Is(err, redis.Nil) {
		return store.ErrExists
	}
	return s.fail("insert", err)
}

func (s *Store) Swap(ctx context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	var cmd *redis.StringCmd
	switch ms := s.ttl(exp); {
	case exp.IsZero():
		cmd = redis.NewStringCmd(ctx, "set", s.key(key), val, "xx", "get", "keepttl")
	case ms == expired: // the new value would be gone at once
		cmd = redis.NewStringCmd(ctx, "getdel", s.key(key))
	default:
		cmd = redis.NewStringCmd(ctx, s.setArgs(key, val, ms, "xx", "get")...)
	}
	_ = s.rdb.Process(ctx, cmd)
	old, err := cmd.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, store.ErrNotFound
	}
	return old, s.fail("swap", err)
}

func (s *Store) Take(ctx context.Context, key string) ([]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	v, err := s.rdb.GetDel(ctx, s.key(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, store.ErrNotFound
	}
	return v, s.fail("take", err)
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.fail("delete", s.rdb.Del(ctx, s.key(key)).Err())
}

// Apply sends the writes in one pipeline: one round trip, and under
// appendfsync always one fsync for all of them. The contract asks no
// atomicity of Apply, so it is not a MULTI/EXEC transaction: a
// transaction would add two commands and hold up every other client
// while it runs, for a promise no caller relies on.
func (s *Store) Apply(ctx context.Context, ws []store.Write) error {
	if err := s.open(); err != nil {
		return err
	}
	if len(ws) == 0 {
		return nil
	}
	if err := store.CheckOld(ws); err != nil {
		return err
	}
	for _, w := range ws {
		if w.Member != "" && w.Val != nil {
			if err := checkScore(w.Score); err != nil {
				return err
			}
		}
	}
	if ws[0].Old != nil {
		return s.applyIf(ctx, ws)
	}
	cmds, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, w := range ws {
			switch {
			case w.Add != 0:
				s.add(ctx, p, w)
			case w.Member != "" && w.Val == nil:
				p.ZRem(ctx, s.set(w.Key), w.Member)
			case w.Member != "":
				p.ZAdd(ctx, s.set(w.Key), redis.Z{Score: float64(w.Score), Member: w.Member})
			case w.Val == nil:
				p.Del(ctx, s.key(w.Key))
			default:
				if ms := s.ttl(w.Exp); ms == expired {
					p.Del(ctx, s.key(w.Key))
				} else {
					p.Do(ctx, s.setArgs(w.Key, w.Val, ms)...)
				}
			}
		}
		return nil
	})
	if errors.Is(err, redis.Nil) {
		// The nil answer of the Add script, a counter started expired
		// (nothing kept): no failure. Another command's error may follow.
		err = nil
		for _, c := range cmds {
			if e := c.Err(); e != nil && !errors.Is(e, redis.Nil) {
				err = e
				break
			}
		}
	}
	return s.fail("apply", err)
}
