// Package store is the contract for everything the service keeps: auth
// codes, tokens, sessions, idempotency keys, rate-limit counters, webhook
// endpoints and their secrets, events, the delivery queue and the
// delivery log. Every backend (the embedded one in package embedded, a
// shared one for several replicas, the edge host's) implements Store, and
// the suite in package storetest checks that it keeps this contract.
//
// Keys and set members are opaque strings (any bytes); values are opaque
// byte slices. A Store copies what it is given, and what it returns
// belongs to the caller.
//
// Durability: a method that changes state returns nil only once the change
// is as durable as the backend promises for an acknowledgement (the
// embedded backend with durability "fsync": on disk, fsynced). When it
// returns an error wrapping ErrUnavailable the change may or may not have
// been made; nothing was promised, and the caller answers 503.
package store

import (
	"context"
	"errors"
	"io/fs"
	"time"
)

var (
	// ErrNotFound: no live entry under the key. It is fs.ErrNotExist, so
	// errors.Is(err, fs.ErrNotExist) also holds.
	ErrNotFound = fs.ErrNotExist
	// ErrExists: Insert found a live entry under the key, left untouched.
	ErrExists = fs.ErrExist
	// ErrConflict: CompareAndSwap found another value than the one expected.
	ErrConflict = errors.New("store: value changed")
	// ErrFull: the change would take the store over its budget of live
	// entries; nothing was changed.
	ErrFull = errors.New("store: over its budget of live entries")
	// ErrUnavailable: the backend cannot read or durably write now (a
	// failed write or fsync, a full disk, an unreachable server, a store
	// being closed). The backend recovers by itself when the cause goes.
	ErrUnavailable = errors.New("store: unavailable")
)

// Store is the service's state. All methods are safe for concurrent use.
//
// Expiry: exp is an absolute time; the zero time means the entry never
// expires. An entry whose expiry has passed is gone for every method, at
// once, whether or not it was swept yet.
type Store interface {
	// Get returns the value of the live entry key, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)

	// GetMany returns the values of the live entries keys, in their
	// order, nil for a key with none (an empty value is not nil): in one
	// call, for a caller that needs several at once (a store of its own
	// answers them in one round trip). It is not a snapshot: another
	// caller's change may be seen for one key and not for another.
	GetMany(ctx context.Context, keys []string) ([][]byte, error)

	// Put sets key to val until exp, live or not before.
	Put(ctx context.Context, key string, val []byte, exp time.Time) error

	// Insert sets key to val until exp if no live entry holds key, and
	// fails with ErrExists otherwise. Of concurrent Inserts of one key
	// exactly one succeeds.
	Insert(ctx context.Context, key string, val []byte, exp time.Time) error

	// Swap replaces the value of the live entry key with val and returns
	// the value it had, in one atomic step: of concurrent Swaps of one key
	// each sees the value the previous one wrote, so exactly one sees the
	// value that was there first. A zero exp keeps the entry's expiry;
	// another sets it. ErrNotFound when key is not live (nothing stored).
	Swap(ctx context.Context, key string, val []byte, exp time.Time) (old []byte, err error)

	// Extend moves the expiry of the live entry key to exp if that is
	// later (the zero exp: never), its value unchanged. ErrNotFound when
	// key is not live.
	Extend(ctx context.Context, key string, exp time.Time) error

	// Take deletes the live entry key and returns its value, in one atomic
	// step: of concurrent Takes of one key exactly one gets the value, the
	// others ErrNotFound.
	Take(ctx context.Context, key string) ([]byte, error)

	// CompareAndSwap sets key to val until exp if its live value is old
	// (old == nil: if no live entry holds key), and fails with ErrConflict
	// otherwise. A zero exp keeps the expiry of the entry replaced (a new
	// entry then never expires). val == nil deletes the entry.
	CompareAndSwap(ctx context.Context, key string, old, val []byte, exp time.Time) error

	// Delete removes key, live or not; deleting nothing is not an error.
	Delete(ctx context.Context, key string) error

	// Add adds delta to the counter at key and returns its new value. A
	// counter that is not live starts at 0 and takes exp as its expiry;
	// a live one keeps its own. Counters are values like any other:
	// Get returns the decimal text of the number.
	Add(ctx context.Context, key string, delta int64, exp time.Time) (int64, error)

	// ZAdd puts member in the sorted set with score, moving it if it was
	// there. Sets never expire; an empty set is no set.
	ZAdd(ctx context.Context, set, member string, score int64) error

	// ZRem removes member from the set; removing nothing is not an error.
	ZRem(ctx context.Context, set, member string) error

	// ZRange returns the members with min <= score <= max, lowest score
	// first (highest first when rev), at most limit of them (limit <= 0:
	// all). Members of equal score come in the order of their names
	// (reversed when rev).
	ZRange(ctx context.Context, set string, min, max int64, limit int, rev bool) ([]Scored, error)

	// ZClaim takes the members with score <= due, lowest score first, at
	// most limit of them, and moves each to score until, in one atomic
	// step: of concurrent claims no two get the same member until its
	// score is due again. It returns them with the scores they had. A
	// queue's worker claims its due items with until = now + a lease, and
	// removes (ZRem) or reschedules (ZAdd) each when done; an item whose
	// worker died comes due again when its lease runs out.
	ZClaim(ctx context.Context, set string, due, until int64, limit int) ([]Scored, error)

	// Apply makes the writes, in order, and returns once all of them are
	// durable: for a caller that changes several keys at once, so that
	// they share one write. It is not atomic: other callers may see some
	// of the writes before the others, and a failure or a crash may keep
	// some of them and not the rest (those kept are the first ones, in
	// order, when it fails or a crash cuts it short).
	//
	// Its first write may be conditional (Write.Old): then Apply makes
	// the writes only if that write's key holds Old when it is made, as
	// CompareAndSwap does, and fails with ErrConflict, making none,
	// otherwise. Old on another write is an error.
	Apply(ctx context.Context, ws []Write) error

	// Close makes every change durable, stops the backend's background
	// work and releases its resources. Methods called after Close fail
	// with ErrUnavailable.
	Close() error
}

// Write is one change of Apply: with Member empty, key Key set to Val
// until Exp (Put), or deleted when Val is nil (Delete); with Member set,
// Member added to the sorted set Key with Score (ZAdd), or removed from it
// when Val is nil (ZRem); with Add not 0, Add added to the counter at Key,
// which takes Exp as its expiry if it starts (Add, its new value
// unknown to the caller; Val and Member unused). Old, not nil, makes a Put
// or Delete the condition of its Apply: Key must hold Old.
type Write struct {
	Key    string
	Val    []byte
	Exp    time.Time
	Member string
	Score  int64
	Add    int64
	Old    []byte
}

// ErrOldNotFirst: an Apply's write other than its first has Old set.
var ErrOldNotFirst = errors.New("store: only an Apply's first write may have Old")

// CheckOld returns ErrOldNotFirst unless only ws's first write, if any,
// has Old set, and that write is a Put or a Delete: for backends.
func CheckOld(ws []Write) error {
	for i, w := range ws {
		if w.Old != nil && (i > 0 || w.Member != "" || w.Add != 0) {
			return ErrOldNotFirst
		}
	}
	return nil
}

// Scored is a member of a sorted set with its score.
type Scored struct {
	Member string
	Score  int64
}
