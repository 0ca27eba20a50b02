package webhook

import (
	"encoding/binary"
	"errors"
	"math"
)

// A delivery's record (hooks:dlv:<id>) is binary rather than JSON: a tag
// byte, then its fields in a fixed order, each string and the event's
// body as a uvarint length and its bytes, each number a varint. Every
// attempt reads it and writes it again, and a publish writes one a
// delivery: as JSON, whose event body is JSON inside JSON and scanned
// again at each decoding and encoding, that was about an eighth of a
// delivery's CPU. Records of the builds before it are JSON (they begin
// with '{', never the tag) and are read as such; decodeRecord tells them
// apart.
const deliveryTag = 0xd1 // version 1 of the format

// The flags byte that follows the tag.
const (
	flagExplicit = 1 << iota
	flagWhileDisabled
	flagEvent // the record holds the event
)

var errDeliveryRecord = errors.New("not a delivery record of this format")

// appendRecord appends d's record to b.
func (d *Delivery) appendRecord(b []byte) []byte {
	var flags byte
	if d.Explicit {
		flags |= flagExplicit
	}
	if d.WhileDisabled {
		flags |= flagWhileDisabled
	}
	if d.Event != nil {
		flags |= flagEvent
	}
	size := 160
	if d.Event != nil {
		size += len(d.Event.Body)
	}
	for i := range d.Attempts {
		size += 160 + len(d.Attempts[i].URL) + len(d.Attempts[i].ResponseBody) + len(d.Attempts[i].Error)
	}
	b = append(make([]byte, 0, len(b)+size), b...)
	b = append(b, deliveryTag, flags)
	b = appendStr(b, d.ID)
	b = binary.AppendUvarint(b, d.Seq)
	b = appendStr(b, d.EndpointID)
	b = appendStr(b, d.EventID)
	b = appendStr(b, d.Status)
	b = binary.AppendVarint(b, d.CreatedAt)
	b = binary.AppendVarint(b, d.NextAt)
	b = appendStr(b, d.Reason)
	b = appendStr(b, d.StoreID)
	b = binary.AppendVarint(b, d.LoggedAt)
	if ev := d.Event; ev != nil {
		b = appendStr(b, ev.ID)
		b = appendStr(b, ev.Type)
		b = binary.AppendVarint(b, ev.CreatedAt)
		b = append(binary.AppendUvarint(b, uint64(len(ev.Body))), ev.Body...)
	}
	b = binary.AppendUvarint(b, uint64(len(d.Attempts)))
	for i := range d.Attempts {
		a := &d.Attempts[i]
		b = binary.AppendVarint(b, a.At)
		b = appendStr(b, a.URL)
		b = binary.AppendVarint(b, a.Timestamp)
		b = appendStr(b, a.Signature)
		b = appendStr(b, a.StdSignature)
		b = binary.AppendVarint(b, int64(a.Status))
		b = appendStr(b, a.ResponseBody)
		b = binary.AppendVarint(b, a.DurationMS)
		b = appendStr(b, a.Error)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// parseRecord sets d to the record b, which appendRecord made. The
// event's body shares b's bytes: b must not change after (a record read
// from the store is its reader's).
func (d *Delivery) parseRecord(b []byte) error {
	r := recordReader{b: b}
	if r.byte() != deliveryTag {
		return errDeliveryRecord
	}
	flags := r.byte()
	*d = Delivery{Explicit: flags&flagExplicit != 0, WhileDisabled: flags&flagWhileDisabled != 0}
	d.ID = r.str()
	d.Seq = r.uint()
	d.EndpointID = r.str()
	d.EventID = r.str()
	d.Status = r.str()
	d.CreatedAt = r.int()
	d.NextAt = r.int()
	d.Reason = r.str()
	d.StoreID = r.str()
	d.LoggedAt = r.int()
	if flags&flagEvent != 0 {
		d.Event = &Event{ID: r.str(), Type: r.str(), CreatedAt: r.int()}
		d.Event.Body = r.bytes()
	}
	n := r.uint()
	if n > uint64(len(r.b)) { // each attempt takes bytes: a count past them is damage
		return errDeliveryRecord
	}
	if n > 0 {
		d.Attempts = make([]Attempt, n)
	}
	for i := range d.Attempts {
		a := &d.Attempts[i]
		a.At = r.int()
		a.URL = r.str()
		a.Timestamp = r.int()
		a.Signature = r.str()
		a.StdSignature = r.str()
		status := r.int()
		if status < math.MinInt32 || status > math.MaxInt32 {
			r.err = errDeliveryRecord
		}
		a.Status = int(status)
		a.ResponseBody = r.str()
		a.DurationMS = r.int()
		a.Error = r.str()
	}
	if r.err != nil || len(r.b) > 0 {
		return errDeliveryRecord
	}
	return nil
}

// recordReader reads the fields of a binary record in turn; past its end
// or at a malformed field it sets err, and reads zeros from then on.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) fail() {
	r.b, r.err = nil, errDeliveryRecord
}

func (r *recordReader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recordReader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) int() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes returns the next length-prefixed field, sharing r's bytes.
func (r *recordReader) bytes() []byte {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *recordReader) str() string { return string(r.bytes()) }
