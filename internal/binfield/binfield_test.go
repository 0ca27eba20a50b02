package binfield

import (
	"encoding/binary"
	"testing"
)

func TestReader(t *testing.T) {
	whole := AppendBytes(AppendStr(binary.AppendVarint(binary.AppendUvarint([]byte{7}, 300), -5), "héllo"), []byte{1, 2})
	r := NewReader(whole)
	if c, u, i, s, p := r.Byte(), r.Uint(), r.Int(), r.Str(), r.Bytes(); c != 7 || u != 300 || i != -5 || s != "héllo" || string(p) != "\x01\x02" || !r.Done() {
		t.Fatalf("read = %d, %d, %d, %q, %v, done %v; want 7, 300, -5, \"héllo\", [1 2], true", c, u, i, s, p, r.Done())
	}
	for _, tc := range []struct {
		name string
		b    []byte
		read func(*Reader)
	}{
		{"empty byte", nil, func(r *Reader) { r.Byte() }},
		{"cut uvarint", []byte{0x80}, func(r *Reader) { r.Uint() }},
		{"cut varint", []byte{0x80}, func(r *Reader) { r.Int() }},
		{"length past the end", []byte{5, 'a'}, func(r *Reader) { r.Str() }},
		{"left over", []byte{1, 'a', 'b'}, func(r *Reader) { r.Str() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.b)
			tc.read(r)
			if r.Done() {
				t.Errorf("NewReader(%q) after the read: Done() = true; want false", tc.b)
			}
			if r.Uint() != 0 && r.Bad() {
				t.Errorf("a bad reader read a number")
			}
		})
	}
}
