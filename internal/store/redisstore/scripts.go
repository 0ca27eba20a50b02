//go:build !wasip1

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"deeplink/internal/store"
)

// The changes that read before they write are Lua scripts: Redis runs a
// script as one step, with no other client's command in between. They are
// sent by their SHA1 (EVALSHA), and in full only when the server does not
// know them yet (after its restart, say). Times left are in milliseconds,
// as ttl makes them: forever (-1), expired (0) or more.

// keepTTL is the time left that tells casScript to keep the entry's own.
const keepTTL = -2

// casScript is CompareAndSwap. KEYS[1]: the entry. ARGV[1]: "1" when its
// value must be ARGV[2], "0" when no entry may be there. ARGV[3]: "1" to
// set it to ARGV[4], "0" to delete it. ARGV[5]: the time left. Returns 1
// when it swapped, 0 on a conflict.
var casScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
local ms = tonumber(ARGV[5])
if ARGV[3] == '0' or ms == 0 then
  redis.call('DEL', KEYS[1])
elseif ms == -2 then
  redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
elseif ms == -1 then
  redis.call('SET', KEYS[1], ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
end
return 1
`)

// extendScript is Extend. KEYS[1]: the entry. ARGV[1]: the time left it
// is to have if that is longer (-1: forever). Returns 0 when there is no
// entry, 1 otherwise.
var extendScript = redis.NewScript(`
local left = redis.call('PTTL', KEYS[1])
if left == -2 then return 0 end
local ms = tonumber(ARGV[1])
if left >= 0 then
  if ms == -1 then
    redis.call('PERSIST', KEYS[1])
  elseif ms > left then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
  end
end
return 1
`)

// addScript is Add. KEYS[1]: the counter. ARGV[1]: the delta. ARGV[2]: the
// time left of a counter it starts. Returns the new value as its decimal
// text (a Lua number would round past 2^53), or nil for a counter started
// with an expiry that has passed: nothing is kept and the value is the
// delta.
var addScript = redis.NewScript(`
local new = redis.call('EXISTS', KEYS[1]) == 0
if new and ARGV[2] == '0' then return false end
redis.call('INCRBY', KEYS[1], ARGV[1])
if new and ARGV[2] ~= '-1' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return redis.call('GET', KEYS[1])
`)

// zclaimScript is ZClaim. KEYS[1]: the set. ARGV[1]: due. ARGV[2]: until.
// ARGV[3]: the limit (0: none). Returns the members claimed and the
// scores they had, flat: member, score, member, score...
var zclaimScript = redis.NewScript(`
local got
if ARGV[3] == '0' then
  got = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES')
else
  got = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[3])
end
for i = 1, #got, 2 do
  redis.call('ZADD', KEYS[1], ARGV[2], got[i])
end
return got
`)

// applyIfScript is an Apply whose first write is conditional, in one
// atomic step. KEYS: the writes' keys, the first the condition's. ARGV[1]:
// the value it must hold. Then three per write: the op ("set", "del",
// "zadd", "zrem" or "add") and its two arguments: set: the value and the
// time left (-1: forever); zadd: the score and the member; zrem: the
// member; add: the delta and the time left of a counter it starts (0:
// none kept). Returns 1 when it wrote, 0 on a conflict.
var applyIfScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 1, #KEYS do
  local k, op, a, b = KEYS[i], ARGV[3*i-1], ARGV[3*i], ARGV[3*i+1]
  if op == 'set' then
    if b == '-1' then redis.call('SET', k, a) else redis.call('SET', k, a, 'PX', b) end
  elseif op == 'del' then
    redis.call('DEL', k)
  elseif op == 'zadd' then
    redis.call('ZADD', k, a, b)
  elseif op == 'zrem' then
    redis.call('ZREM', k, a)
  else
    local new = redis.call('EXISTS', k) == 0
    if not (new and b == '0') then
      redis.call('INCRBY', k, a)
      if new and b ~= '-1' then redis.call('PEXPIRE', k, b) end
    end
  end
end
return 1
`)

// applyIf is Apply of ws, whose first write has Old (applyIfScript).
func (s *Store) applyIf(ctx context.Context, ws []store.Write) error {
	keys := make([]string, len(ws))
	args := make([]any, 1, 1+3*len(ws))
	args[0] = ws[0].Old
	for i, w := range ws {
		keys[i] = s.key(w.Key)
		switch ms := s.ttl(w.Exp); {
		case w.Add != 0:
			args = append(args, "add", w.Add, ms)
		case w.Member != "" && w.Val == nil:
			keys[i] = s.set(w.Key)
			args = append(args, "zrem", w.Member, "")
		case w.Member != "":
			keys[i] = s.set(w.Key)
			args = append(args, "zadd", w.Score, w.Member)
		case w.Val == nil || ms == expired:
			args = append(args, "del", "", "")
		default:
			args = append(args, "set", w.Val, ms)
		}
	}
	wrote, err := applyIfScript.Run(ctx, s.rdb, keys, args...).Int()
	if err == nil && wrote == 0 {
		return store.ErrConflict
	}
	return s.fail("apply", err)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (s *Store) CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	ms := s.ttl(exp)
	if exp.IsZero() {
		ms = keepTTL // a new entry then has none: never expires
	}
	ok, err := casScript.Run(ctx, s.rdb, []string{s.key(key)},
		flag(old != nil), old, flag(val != nil), val, ms).Int()
	if err == nil && ok == 0 {
		return store.ErrConflict
	}
	return s.fail("compare-and-swap", err)
}

func (s *Store) Extend(ctx context.Context, key string, exp time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	found, err := extendScript.Run(ctx, s.rdb, []string{s.key(key)}, s.ttl(exp)).Int()
	if err == nil && found == 0 {
		return store.ErrNotFound
	}
	return s.fail("extend", err)
}

func (s *Store) Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	text, err := addScript.Run(ctx, s.rdb, []string{s.key(key)}, delta, s.ttl(exp)).Text()
	if errors.Is(err, redis.Nil) {
		return delta, nil
	}
	if err != nil {
		return 0, s.fail(fmt.Sprintf("add to %q", key), err)
	}
	return strconv.ParseInt(text, 10, 64)
}

// add queues the counter increment w in the pipeline p: one INCRBY for a
// counter that never expires (it starts at 0, as a missing key does for
// INCRBY), the Add script otherwise, sent whole (EVAL): a script a
// pipeline asks for by its SHA1 alone could be unknown to the server, and
// a pipeline is not sent again.
func (s *Store) add(ctx context.Context, p redis.Pipeliner, w store.Write) {
	switch ms := s.ttl(w.Exp); ms {
	case forever:
		p.IncrBy(ctx, s.key(w.Key), w.Add)
	default:
		addScript.Eval(ctx, p, []string{s.key(w.Key)}, w.Add, ms)
	}
}

// maxScore is the largest magnitude of a score that a double holds
// exactly, and so Redis.
const maxScore = 1 << 53

func checkScore(score int64) error {
	if score > maxScore || score < -maxScore {
		return fmt.Errorf("redisstore: score %d is beyond ±2^53, past which Redis's scores (doubles) round", score)
	}
	return nil
}

// bound is min or max of a range in Redis's terms: beyond ±2^53, where no
// score can be, an infinity (so that math.MinInt64 and math.MaxInt64 mean
// "all").
func bound(v int64) string {
	switch {
	case v < -maxScore:
		return "-inf"
	case v > maxScore:
		return "+inf"
	}
	return strconv.FormatInt(v, 10)
}

func (s *Store) ZAdd(ctx context.Context, set, member string, score int64) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := checkScore(score); err != nil {
		return err
	}
	return s.fail("zadd", s.rdb.ZAdd(ctx, s.set(set), redis.Z{Score: float64(score), Member: member}).Err())
}

func (s *Store) ZRem(ctx context.Context, set, member string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.fail("zrem", s.rdb.ZRem(ctx, s.set(set), member).Err())
}

func (s *Store) ZRange(ctx context.Context, set string, min, max int64, limit int, rev bool) ([]store.Scored, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	r := &redis.ZRangeBy{Min: bound(min), Max: bound(max)}
	if limit > 0 {
		r.Count = int64(limit)
	}
	var zs []redis.Z
	var err error
	if rev {
		zs, err = s.rdb.ZRevRangeByScoreWithScores(ctx, s.set(set), r).Result()
	} else {
		zs, err = s.rdb.ZRangeByScoreWithScores(ctx, s.set(set), r).Result()
	}
	if err != nil {
		return nil, s.fail("zrange", err)
	}
	out := make([]store.Scored, len(zs))
	for i, z := range zs {
		out[i] = store.Scored{Member: z.Member.(string), Score: int64(z.Score)}
	}
	return out, nil
}

func (s *Store) ZClaim(ctx context.Context, set string, due, until int64, limit int) ([]store.Scored, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if err := checkScore(until); err != nil {
		return nil, err
	}
	flat, err := zclaimScript.Run(ctx, s.rdb, []string{s.set(set)}, bound(due), until, max(limit, 0)).StringSlice()
	if err != nil {
		return nil, s.fail("zclaim", err)
	}
	out := make([]store.Scored, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		sc, err := parseScore(flat[i+1])
		if err != nil {
			return nil, fmt.Errorf("redisstore: zclaim: score %q: %w", flat[i+1], err)
		}
		out = append(out, store.Scored{Member: flat[i], Score: sc})
	}
	return out, nil
}

// parseScore reads a score as Redis writes it: an integer's digits, or a
// double's text for one written by another client.
func parseScore(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	return int64(f), err
}
