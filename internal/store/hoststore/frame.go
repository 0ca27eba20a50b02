package hoststore

import (
	"encoding/binary"
	"errors"
	"time"
)

// The frames: a request is an op byte then its arguments, a reply a
// status byte then its results, each field in turn:
//
//	string, []byte   uvarint length+1, then the bytes (0: a nil []byte)
//	int64            zigzag varint
//	time.Time        int64 unix nanoseconds, 0 for the zero time
//
// Nothing is aligned or padded: a frame is read front to back once.

var errFrame = errors.New("hoststore: truncated or malformed frame")

type enc struct{ b []byte }

func (e *enc) byte(c byte)      { e.b = append(e.b, c) }
func (e *enc) int(v int64)      { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.b = append(binary.AppendUvarint(e.b, uint64(len(s))+1), s...) }
func (e *enc) time(t time.Time) { e.int(unixNano(t)) }

func (e *enc) bytes(p []byte) {
	if p == nil {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(binary.AppendUvarint(e.b, uint64(len(p))+1), p...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

type dec struct {
	b   []byte
	bad bool
}

func (d *dec) byte() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *dec) int() int64 {
	v, n := binary.Varint(d.b)
	if d.bad || n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next []byte field, a copy (nil for nil).
func (d *dec) bytes() []byte {
	l, n := binary.Uvarint(d.b)
	if d.bad || n <= 0 || l > uint64(len(d.b)-n)+1 {
		d.bad = true
		return nil
	}
	d.b = d.b[n:]
	if l == 0 {
		return nil
	}
	p := append([]byte{}, d.b[:l-1]...)
	d.b = d.b[l-1:]
	return p
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) time() time.Time {
	if ns := d.int(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// done reports whether the frame was read whole and well.
func (d *dec) done() error {
	if d.bad || len(d.b) != 0 {
		return errFrame
	}
	return nil
}
