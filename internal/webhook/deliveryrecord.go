package webhook

import (
	"encoding/binary"
	"errors"
	"math"

	"deeplink/internal/binfield"
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
	// Room for the whole record, its ids and signatures included, so
	// that it is made in one allocation.
	size := 320
	if d.Event != nil {
		size += len(d.Event.Body)
	}
	for i := range d.Attempts {
		size += 200 + len(d.Attempts[i].URL) + len(d.Attempts[i].ResponseBody) + len(d.Attempts[i].Error)
	}
	b = append(make([]byte, 0, len(b)+size), b...)
	b = append(b, deliveryTag, flags)
	b = binfield.AppendStr(b, d.ID)
	b = binary.AppendUvarint(b, d.Seq)
	b = binfield.AppendStr(b, d.EndpointID)
	b = binfield.AppendStr(b, d.EventID)
	b = binfield.AppendStr(b, d.Status)
	b = binary.AppendVarint(b, d.CreatedAt)
	b = binary.AppendVarint(b, d.NextAt)
	b = binfield.AppendStr(b, d.Reason)
	b = binfield.AppendStr(b, d.StoreID)
	b = binary.AppendVarint(b, d.LoggedAt)
	if ev := d.Event; ev != nil {
		b = binfield.AppendStr(b, ev.ID)
		b = binfield.AppendStr(b, ev.Type)
		b = binary.AppendVarint(b, ev.CreatedAt)
		b = append(binary.AppendUvarint(b, uint64(len(ev.Body))), ev.Body...)
	}
	b = binary.AppendUvarint(b, uint64(len(d.Attempts)))
	for i := range d.Attempts {
		a := &d.Attempts[i]
		b = binary.AppendVarint(b, a.At)
		b = binfield.AppendStr(b, a.URL)
		b = binary.AppendVarint(b, a.Timestamp)
		b = binfield.AppendStr(b, a.Signature)
		b = binfield.AppendStr(b, a.StdSignature)
		b = binary.AppendVarint(b, int64(a.Status))
		b = binfield.AppendStr(b, a.ResponseBody)
		b = binary.AppendVarint(b, a.DurationMS)
		b = binfield.AppendStr(b, a.Error)
	}
	return b
}

// parseRecord sets d to the record b, which appendRecord made. The
// event's body shares b's bytes: b must not change after (a record read
// from the store is its reader's).
func (d *Delivery) parseRecord(b []byte) error {
	r := binfield.NewReader(b)
	if r.Byte() != deliveryTag {
		return errDeliveryRecord
	}
	flags := r.Byte()
	*d = Delivery{Explicit: flags&flagExplicit != 0, WhileDisabled: flags&flagWhileDisabled != 0}
	d.ID = r.Str()
	d.Seq = r.Uint()
	d.EndpointID = r.Str()
	d.EventID = r.Str()
	d.Status = r.Str()
	d.CreatedAt = r.Int()
	d.NextAt = r.Int()
	d.Reason = r.Str()
	d.StoreID = r.Str()
	d.LoggedAt = r.Int()
	if flags&flagEvent != 0 {
		d.Event = &Event{ID: r.Str(), Type: r.Str(), CreatedAt: r.Int()}
		d.Event.Body = r.Bytes()
	}
	n := r.Uint()
	if n > uint64(r.Len()) { // each attempt takes bytes: a count past them is damage
		return errDeliveryRecord
	}
	if n > 0 {
		d.Attempts = make([]Attempt, n)
	}
	for i := range d.Attempts {
		a := &d.Attempts[i]
		a.At = r.Int()
		a.URL = r.Str()
		a.Timestamp = r.Int()
		a.Signature = r.Str()
		a.StdSignature = r.Str()
		status := r.Int()
		if status < math.MinInt32 || status > math.MaxInt32 {
			r.Fail()
		}
		a.Status = int(status)
		a.ResponseBody = r.Str()
		a.DurationMS = r.Int()
		a.Error = r.Str()
	}
	if !r.Done() {
		return errDeliveryRecord
	}
	return nil
}
