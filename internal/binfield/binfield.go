// Package binfield reads and writes the fields of the project's binary
// formats (the edge module's frames, a delivery's record): numbers as
// varints, strings and byte slices as a uvarint length and their bytes.
package binfield

import "encoding/binary"

// AppendStr appends s, length-prefixed, to b.
func AppendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendBytes appends p, length-prefixed, to b.
func AppendBytes(b, p []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

// Reader reads fields from the front of its bytes in turn. Past their end
// or at a malformed field it is bad, and reads zeros from then on.
type Reader struct {
	b   []byte
	bad bool
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Bad reports whether a read failed, or Fail was called.
func (r *Reader) Bad() bool { return r.bad }

// Fail makes r bad: for a caller that finds a field out of its range.
func (r *Reader) Fail() { r.b, r.bad = nil, true }

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		r.Fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Uint reads a uvarint.
func (r *Reader) Uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Int reads a varint.
func (r *Reader) Int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bytes reads a length-prefixed field, sharing r's bytes.
func (r *Reader) Bytes() []byte {
	n := r.Uint()
	if n > uint64(len(r.b)) {
		r.Fail()
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

// Str reads a length-prefixed string.
func (r *Reader) Str() string { return string(r.Bytes()) }

// Done reports whether every field was read whole and nothing is left.
func (r *Reader) Done() bool { return !r.bad && len(r.b) == 0 }
