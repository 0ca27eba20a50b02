package embedded

import (
	"bytes"
	"testing"
)

// FuzzRecord checks that a record decodes to what was encoded, and that
// no input makes the decoder panic or accept bytes past a record.
func FuzzRecord(f *testing.F) {
	f.Add(byte(opPut), "key", "member", []byte("value"), int64(1), []byte{})
	f.Add(byte(opZAdd), "set", "m", []byte(nil), int64(-5), []byte{4, 0, 0, 0, 1, 2, 3, 4, 'p'})
	f.Fuzz(func(t *testing.T, op byte, key, member string, val []byte, n int64, junk []byte) {
		nextRecord(junk) // must not panic
		r := record{op: op, key: key}
		switch op {
		case opPut:
			r.val, r.n = val, n
		case opZAdd:
			r.member, r.n = member, n
		case opZRem:
			r.member = member
		case opEnd:
			r.n = n
		case opDel:
		default:
			return
		}
		b := appendRecord(nil, r)
		got, size, err := nextRecord(append(b, junk...))
		if err != nil || size != len(b) {
			t.Fatalf("nextRecord(appendRecord(%+v)) = %d bytes, %v; want %d", r, size, err, len(b))
		}
		if got.op != r.op || got.key != r.key || got.member != r.member || got.n != r.n || !bytes.Equal(got.val, r.val) {
			t.Fatalf("round trip: got %+v; want %+v", got, r)
		}
	})
}
