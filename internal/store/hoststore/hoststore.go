// Package hoststore carries the store contract (package store) across the
// boundary between the edge module and its host: the module's store is a
// Client, whose every call is one request frame handed to the host and
// one reply frame back; the host answers each with Serve, on the backend
// it keeps (the embedded one in data_dir, or Redis).
//
// The frames are the package's own (frame.go), so that both sides build
// and test natively: the suite of package storetest runs against a Client
// wired straight to Serve. On wasip1, Imported returns the Client of the
// host functions the host provides as the module deeplink_store (import_wasip1.go).
package hoststore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"deeplink/internal/store"
)

// The operations, the first byte of a request: one per method of
// store.Store, and the few the service asks of its store beyond it
// (Failing, Len, Count).
const (
	opGet byte = iota + 1
	opPut
	opInsert
	opSwap
	opExtend
	opTake
	opCAS
	opDelete
	opAdd
	opZAdd
	opZRem
	opZRange
	opZClaim
	opApply
	opFailing
	opLen
	opCount
	opGetMany
	opApplyIf // Apply whose first write has Old: Old, then opApply's frame
)

// The statuses, the first byte of a reply: ok, or which of the
// contract's errors. An error of another kind is statusOther with its
// text; the client reports it as ErrUnavailable, nothing promised.
const (
	statusOK byte = iota
	statusNotFound
	statusExists
	statusConflict
	statusFull
	statusUnavailable
	statusOther
)

var statusErr = map[byte]error{
	statusNotFound:    store.ErrNotFound,
	statusExists:      store.ErrExists,
	statusConflict:    store.ErrConflict,
	statusFull:        store.ErrFull,
	statusUnavailable: store.ErrUnavailable,
}

// Client is a store.Store whose calls the host answers. It holds no
// state of its own.
type Client struct {
	// call hands the host a request frame and returns its reply frame.
	call func(req []byte) []byte
}

// NewClient returns the client that sends each request through call.
func NewClient(call func(req []byte) []byte) *Client { return &Client{call: call} }

var _ store.Store = (*Client)(nil)

// do sends the request in e and returns a decoder of the reply's results,
// or the error its status stands for.
func (c *Client) do(e *enc) (*dec, error) {
	d := &dec{b: c.call(e.b)}
	st := d.byte()
	switch {
	case d.bad:
		return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, errFrame)
	case st == statusOK:
		return d, nil
	case st == statusOther || st == statusUnavailable:
		return nil, fmt.Errorf("%w: %s", store.ErrUnavailable, d.str())
	case statusErr[st] != nil:
		return nil, statusErr[st]
	}
	return nil, fmt.Errorf("%w: hoststore: reply status %d", store.ErrUnavailable, st)
}

// ok sends the request in e, for a method that returns nothing but an
// error.
func (c *Client) ok(e *enc) error {
	d, err := c.do(e)
	if err != nil {
		return err
	}
	return d.done()
}

// value sends the request in e, for a method that returns a value.
func (c *Client) value(e *enc) ([]byte, error) {
	d, err := c.do(e)
	if err != nil {
		return nil, err
	}
	v := d.bytes()
	return v, d.done()
}

func req(op byte) *enc { return &enc{b: append(make([]byte, 0, 64), op)} }

// setReq is the request of an operation that sets key to val until exp.
func setReq(op byte, key string, val []byte, exp time.Time) *enc {
	e := req(op)
	e.str(key)
	e.bytes(nonNil(val))
	e.time(exp)
	return e
}

func (c *Client) Get(_ context.Context, key string) ([]byte, error) {
	e := req(opGet)
	e.str(key)
	return c.value(e)
}

func (c *Client) GetMany(_ context.Context, keys []string) ([][]byte, error) {
	e := req(opGetMany)
	e.int(int64(len(keys)))
	for _, k := range keys {
		e.str(k)
	}
	d, err := c.do(e)
	if err != nil {
		return nil, err
	}
	if n := d.int(); n != int64(len(keys)) {
		return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, errFrame)
	}
	out := make([][]byte, len(keys))
	for i := range out {
		out[i] = d.bytes() // nil for none: a value is sent non-nil
	}
	return out, d.done()
}

func (c *Client) Put(_ context.Context, key string, val []byte, exp time.Time) error {
	return c.ok(setReq(opPut, key, val, exp))
}

func (c *Client) Insert(_ context.Context, key string, val []byte, exp time.Time) error {
	return c.ok(setReq(opInsert, key, val, exp))
}

func (c *Client) Swap(_ context.Context, key string, val []byte, exp time.Time) ([]byte, error) {
	return c.value(setReq(opSwap, key, val, exp))
}

func (c *Client) Extend(_ context.Context, key string, exp time.Time) error {
	e := req(opExtend)
	e.str(key)
	e.time(exp)
	return c.ok(e)
}

func (c *Client) Take(_ context.Context, key string) ([]byte, error) {
	e := req(opTake)
	e.str(key)
	return c.value(e)
}

func (c *Client) CompareAndSwap(_ context.Context, key string, old, val []byte, exp time.Time) error {
	e := req(opCAS)
	e.str(key)
	e.bytes(old)
	e.bytes(val)
	e.time(exp)
	return c.ok(e)
}

func (c *Client) Delete(_ context.Context, key string) error {
	e := req(opDelete)
	e.str(key)
	return c.ok(e)
}

func (c *Client) Add(_ context.Context, key string, delta int64, exp time.Time) (int64, error) {
	e := req(opAdd)
	e.str(key)
	e.int(delta)
	e.time(exp)
	d, err := c.do(e)
	if err != nil {
		return 0, err
	}
	n := d.int()
	return n, d.done()
}

func (c *Client) ZAdd(_ context.Context, set, member string, score int64) error {
	e := req(opZAdd)
	e.str(set)
	e.str(member)
	e.int(score)
	return c.ok(e)
}

func (c *Client) ZRem(_ context.Context, set, member string) error {
	e := req(opZRem)
	e.str(set)
	e.str(member)
	return c.ok(e)
}

func (c *Client) ZRange(_ context.Context, set string, min, max int64, limit int, rev bool) ([]store.Scored, error) {
	e := req(opZRange)
	e.str(set)
	e.int(min)
	e.int(max)
	e.int(int64(limit))
	e.byte(boolByte(rev))
	return c.scored(e)
}

func (c *Client) ZClaim(_ context.Context, set string, due, until int64, limit int) ([]store.Scored, error) {
	e := req(opZClaim)
	e.str(set)
	e.int(due)
	e.int(until)
	e.int(int64(limit))
	return c.scored(e)
}

func (c *Client) scored(e *enc) ([]store.Scored, error) {
	d, err := c.do(e)
	if err != nil {
		return nil, err
	}
	n := d.int() // a member takes at least 2 bytes of the frame
	if n < 0 || n > int64(len(d.b))/2 {
		return nil, fmt.Errorf("%w: %v", store.ErrUnavailable, errFrame)
	}
	out := make([]store.Scored, n)
	for i := range out {
		out[i] = store.Scored{Member: d.str(), Score: d.int()}
	}
	return out, d.done()
}

func (c *Client) Apply(_ context.Context, ws []store.Write) error {
	if err := store.CheckOld(ws); err != nil {
		return err
	}
	e := req(opApply)
	if len(ws) > 0 && ws[0].Old != nil {
		// An op of its own, so that a host of an earlier build refuses it
		// rather than read it as opApply.
		e = req(opApplyIf)
		e.bytes(ws[0].Old)
	}
	e.int(int64(len(ws)))
	for _, w := range ws {
		e.str(w.Key)
		e.bytes(w.Val)
		e.time(w.Exp)
		e.str(w.Member)
		e.int(w.Score)
		e.int(w.Add)
	}
	return c.ok(e)
}

// Close releases nothing: the host owns the backend, and closes it.
func (c *Client) Close() error { return nil }

// Failing reports why the host's backend cannot take changes now, or
// nil, from what the host already knows (no round trip to Redis).
func (c *Client) Failing() error {
	err := c.ok(req(opFailing))
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return err
}

// Len returns the number of live entries, or -1 when the backend cannot
// count them cheaply (Redis).
func (c *Client) Len() int {
	d, err := c.do(req(opLen))
	if err != nil {
		return -1
	}
	return int(d.int())
}

// Count returns the number of live entries under prefix whose value
// starts with first, or -1 when the backend cannot count them cheaply.
func (c *Client) Count(prefix string, first byte) int {
	e := req(opCount)
	e.str(prefix)
	e.byte(first)
	d, err := c.do(e)
	if err != nil {
		return -1
	}
	return int(d.int())
}

// nonNil keeps a value apart from the nil that stands for "none" in the
// frames: a value set is never nil, even an empty one.
func nonNil(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
