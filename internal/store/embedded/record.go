package embedded

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"unsafe"
)

// The journal and the snapshot hold the same records, each framed as
//
//	length  uint32, little endian: the payload's length
//	crc     uint32, little endian: CRC-32C of the payload
//	payload op byte, then the op's fields
//
// Every record states a result, never a step (a counter's new value, not
// its delta), so replaying one whose effect the snapshot already holds
// changes nothing.
const (
	opPut   = 'p' // key, exp, val
	opDel   = 'd' // key
	opZAdd  = 'z' // set, member, score
	opZRem  = 'r' // set, member
	opEnd   = 'e' // key empty, n: the records before it; the last record of a snapshot
	opBatch = 'b' // key empty, then fixed: uint32 n, uint64 at; see below
)

// A journal's batches each open with an opBatch record: n, the bytes of
// the batch's records after it, and at, its own offset in the file. A
// batch is written only once the one before it is on disk, so a batch
// header after a bad record proves the bad record reached the disk whole
// once: damage, not a write a crash cut short. at keeps a header that is
// part of a value from passing for one.
const batchHeaderSize = frameSize + 1 + 1 + 4 + 8

// putBatchHeader writes the header of the batch b, to be written at
// offset at, in the space b opens with.
func putBatchHeader(b []byte, at int64) {
	p := b[frameSize:batchHeaderSize]
	p[0], p[1] = opBatch, 0
	binary.LittleEndian.PutUint32(p[2:], uint32(len(b)-batchHeaderSize))
	binary.LittleEndian.PutUint64(p[6:], uint64(at))
	binary.LittleEndian.PutUint32(b, uint32(len(p)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(p, castagnoli))
}

const frameSize = 8

// maxRecord bounds a payload: a length beyond it is damage, not a record.
const maxRecord = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one decoded record. exp and score are unix nanoseconds and a
// set's score; the strings alias the buffer decoded from.
type record struct {
	op          byte
	key, member string // key: the entry's key or the set's name
	val         []byte
	n           int64 // exp for opPut, score for opZAdd, the batch's length for opBatch
	at          int64 // for opBatch: its offset in its file
	shard       uint8 // at load: the shard of key, for opPut and opDel
}

// appendRecord appends r, framed, to b.
func appendRecord(b []byte, r record) []byte {
	start := len(b)
	b = append(b, make([]byte, frameSize)...)
	b = append(b, r.op)
	b = appendString(b, r.key)
	switch r.op {
	case opPut:
		b = binary.AppendVarint(b, r.n)
		b = binary.AppendUvarint(b, uint64(len(r.val)))
		b = append(b, r.val...)
	case opZAdd:
		b = appendString(b, r.member)
		b = binary.AppendVarint(b, r.n)
	case opEnd:
		b = binary.AppendVarint(b, r.n)
	case opZRem:
		b = appendString(b, r.member)
	}
	payload := b[start+frameSize:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var (
	errShort    = errors.New("record cut short")
	errChecksum = errors.New("record checksum does not match")
	errBadOp    = errors.New("record of unknown kind")
	errBadField = errors.New("record fields do not add up")
)

// nextRecord decodes the record at the start of b and returns it with its
// framed size. errShort means b ends inside the record.
func nextRecord(b []byte) (r record, size int, err error) {
	if len(b) < frameSize {
		return r, 0, errShort
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxRecord {
		return r, 0, errBadField
	}
	if uint64(len(b)-frameSize) < uint64(n) {
		return r, 0, errShort
	}
	payload := b[frameSize : frameSize+int(n)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return r, 0, errChecksum
	}
	r, err = decodePayload(payload)
	return r, frameSize + int(n), err
}

func decodePayload(p []byte) (r record, err error) {
	d := decoder{b: p[1:]}
	r.op = p[0]
	r.key = d.str()
	switch r.op {
	case opPut:
		r.n = d.varint()
		r.val = d.bytes()
	case opDel:
	case opZAdd:
		r.member = d.str()
		r.n = d.varint()
	case opZRem:
		r.member = d.str()
	case opEnd:
		r.n = d.varint()
	case opBatch:
		if f := d.fixed(12); f != nil {
			r.n = int64(binary.LittleEndian.Uint32(f))
			r.at = int64(binary.LittleEndian.Uint64(f[4:]))
		}
	default:
		return r, errBadOp
	}
	if d.bad || len(d.b) != 0 {
		return r, errBadField
	}
	return r, nil
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) bytes() []byte {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		d.bad = true
		d.b = nil
		return nil
	}
	v := d.b[k : k+int(n)]
	d.b = d.b[k+int(n):]
	return v
}

// str is the next string; it aliases the buffer decoded from, which
// must not change while the string is in use.
func (d *decoder) str() string {
	b := d.bytes()
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// fixed is the next n bytes, or nil.
func (d *decoder) fixed(n int) []byte {
	if len(d.b) < n {
		d.bad = true
		d.b = nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[k:]
	return v
}
