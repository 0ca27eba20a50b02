package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"deeplink/internal/store"
)

// FuzzCrash: changes, the first ones acknowledged (Sync), then a crash
// whose last journal write is torn at a point the input picks (the
// bytes after it never reached the disk: the zeros the journal was
// filled with ahead of its records). The next start must succeed, with
// every acknowledged change, and of the later ones a prefix, in order.
func FuzzCrash(f *testing.F) {
	for _, seed := range [][]byte{
		{3, 0, 0, 10, 1, 1, 20, 2, 0, 0, 0, 3, 5, 200},
		{1, 0, 0, 1, 0, 1, 2, 2, 3, 0, 4, 5, 6, 7, 8, 9, 17},
		{0, 2, 1, 0, 2, 2, 0, 255},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		split, cutAt, ops := int(in[0]), in[len(in)-1], decodeOps(in[1:len(in)-1])
		split = min(split, len(ops))
		dir := t.TempDir()
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		db, err := Open(dir, Options{Durability: Interval, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		model := map[string]string{}
		for _, op := range ops[:split] {
			op.apply(ctx, t, db)
			op.model(model)
		}
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
		journal := lastJournal(t, dir)
		acked := recordsEnd(t, journal)
		for _, op := range ops[split:] {
			op.apply(ctx, t, db)
		}
		if err := db.Sync(); err != nil {
			t.Fatal(err)
		}
		db.abandon()
		end := recordsEnd(t, journal)
		cut := acked + int64(cutAt)*(end-acked)/255
		tear(t, journal, cut, end)

		db, err = Open(dir, Options{Logger: logger})
		if err != nil {
			t.Fatalf("start after a write torn at %d of %d..%d: %v", cut, acked, end, err)
		}
		defer db.Close()
		got := map[string]string{}
		for _, k := range fuzzKeys {
			v, err := db.Get(ctx, k)
			switch {
			case err == nil:
				got[k] = string(v)
			case !errors.Is(err, store.ErrNotFound):
				t.Fatal(err)
			}
		}
		want := map[string]string{}
		for k, v := range model {
			want[k] = v
		}
		if sameState(got, want) {
			return
		}
		for _, op := range ops[split:] { // some prefix of the rest
			op.model(want)
			if sameState(got, want) {
				return
			}
		}
		t.Fatalf("after a crash torn at %d (acknowledged up to %d, written up to %d): state %v; want the acknowledged %v and a prefix of %v", cut, acked, end, got, model, ops[split:])
	})
}

var fuzzKeys = []string{"auth:a", "auth:b", "auth:c", "hooks:d"}

// fuzzOp is a Put (val non-empty) or a Delete of a key of fuzzKeys.
type fuzzOp struct {
	key string
	val string
}

func (op fuzzOp) String() string {
	if op.val == "" {
		return "del " + op.key
	}
	return fmt.Sprintf("put %s=%d bytes", op.key, len(op.val))
}

// decodeOps reads two bytes an op: the key and the value's length (0
// deletes).
func decodeOps(b []byte) []fuzzOp {
	var ops []fuzzOp
	for i := 0; i+1 < len(b) && len(ops) < 64; i += 2 {
		op := fuzzOp{key: fuzzKeys[int(b[i])%len(fuzzKeys)]}
		if n := int(b[i+1]); n > 0 {
			op.val = string(bytes.Repeat([]byte{byte('a' + i%26)}, n*7))
		}
		ops = append(ops, op)
	}
	return ops
}

func (op fuzzOp) apply(ctx context.Context, t *testing.T, db *DB) {
	var err error
	if op.val == "" {
		err = db.Delete(ctx, op.key)
		if errors.Is(err, store.ErrNotFound) {
			err = nil
		}
	} else {
		err = db.Put(ctx, op.key, []byte(op.val), time.Time{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (op fuzzOp) model(m map[string]string) {
	if op.val == "" {
		delete(m, op.key)
	} else {
		m[op.key] = op.val
	}
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// recordsEnd is where the records of the journal at path end and its
// zeros begin.
func recordsEnd(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := headerSize
	for off < len(b) {
		n, ok := framedSize(b[off:])
		if !ok {
			break
		}
		off += n
	}
	return int64(off)
}

// tear zeroes the journal at path from cut to end: what a write cut
// short by the crash leaves of it.
func tear(t *testing.T, path string, cut, end int64) {
	if cut >= end {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, end-cut), cut); err != nil {
		t.Fatal(err)
	}
}

// framedSize (the test's) returns the framed size of the record at the start of b, from
// its length alone, and false when that length is out of bounds or runs
// past the end of b.
func framedSize(b []byte) (int, bool) {
	if len(b) < frameSize {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxRecord || uint64(len(b)-frameSize) < uint64(n) {
		return 0, false
	}
	return frameSize + int(n), true
}
