package embedded

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOpenReadsFiles: a start on files made by hand, record by record,
// reads what they hold, drops a torn tail of the last journal only, and
// refuses any other damage with one line naming the file and the offset.
func TestOpenReadsFiles(t *testing.T) {
	put := func(k, v string) record { return record{op: opPut, key: k, val: []byte(v)} }
	del := func(k string) record { return record{op: opDel, key: k} }
	expired := func(k, v string) record { return record{op: opPut, key: k, val: []byte(v), n: 1} } // 1 ns past 1970
	end := func(n int64) record { return record{op: opEnd, n: n} }
	zadd := func(set, m string, s int64) record { return record{op: opZAdd, key: set, member: m, n: s} }
	zrem := func(set, m string) record { return record{op: opZRem, key: set, member: m} }
	file := func(magic string, gen uint64, recs ...record) []byte {
		b := header(magic, gen)
		for _, r := range recs {
			b = appendRecord(b, r)
		}
		return b
	}
	snap := func(gen uint64, recs ...record) []byte { return file(snapMagic, gen, recs...) }
	batchless := func(gen uint64, recs ...record) []byte { return file(batchless, gen, recs...) }
	// batch appends recs to b as one batch, with its header.
	batch := func(b []byte, recs ...record) []byte {
		buf := newBatch(nil).buf
		for _, r := range recs {
			buf = appendRecord(buf, r)
		}
		putBatchHeader(buf, int64(len(b)))
		return append(b, buf...)
	}
	// journal is a journal of recs, each in a batch of its own.
	journal := func(gen uint64, recs ...record) []byte {
		b := header(journalMagic, gen)
		for _, r := range recs {
			b = batch(b, r)
		}
		return b
	}
	// at is the offset of record i of recs in a snapshot or a batchless
	// journal; jat in a journal, after its batch header.
	at := func(i int, recs ...record) int64 {
		n := int64(headerSize)
		for _, r := range recs[:i] {
			n += int64(len(appendRecord(nil, r)))
		}
		return n
	}
	jat := func(i int, recs ...record) int64 { return at(i, recs...) + int64(i+1)*batchHeaderSize }
	size := func(b []byte) int64 { return int64(len(b)) }
	big := strings.Repeat("b", readBuf+100) // longer than the buffer a file is read through
	ab := []record{put("a", "1"), put("b", "2")}
	var many []record // more than a buffer's worth
	manyWant := map[string]string{}
	for i := range readBuf / 50 {
		k, v := fmt.Sprintf("key-%06d", i), fmt.Sprintf("value %030d", i)
		many, manyWant[k] = append(many, put(k, v)), v
	}
	zeros := make([]byte, 4096)

	tests := []struct {
		name  string
		files map[string][]byte
		want  map[string]string // the entries after the start
		set   []string          // the members of set "s"
		// damaged: the file and offset the start refuses, and why
		damaged, why string
		// size: the last journal's size after the start, if it changed (a
		// journal cut off in its header is removed, and the start's new
		// journal takes its name)
		size int64
	}{
		{
			name:  "snapshot and journals",
			files: map[string][]byte{snapName(2): snap(2, put("a", "1"), put("b", "2"), end(2)), journalName(2): journal(2, put("a", "3"), del("b")), journalName(3): journal(3, put("c", big))},
			want:  map[string]string{"a": "3", "c": big},
		},
		{
			name:  "expired puts: dropped, and what they overwrote with them",
			files: map[string][]byte{snapName(2): snap(2, put("a", "1"), put("b", "2"), expired("c", "3"), end(3)), journalName(2): journal(2, expired("a", "x"), expired("e", "old"), put("e", "new"), put("c", "4"))},
			want:  map[string]string{"b": "2", "c": "4", "e": "new"},
		},
		{
			name:  "more records than a buffer holds",
			files: map[string][]byte{snapName(1): snap(1, append(many, end(int64(len(many))))...)},
			want:  manyWant,
		},
		{
			name:  "sets, in order, then more than a buffer",
			files: map[string][]byte{journalName(1): journal(1, append([]record{zadd("s", "x", 1), zadd("s", "y", 2), zrem("s", "x"), zadd("s", "z", 3)}, many...)...)},
			want:  manyWant, set: []string{"y", "z"},
		},
		{
			name:  "journal filled with zeros ahead",
			files: map[string][]byte{journalName(1): append(journal(1, ab...), zeros...)},
			want:  map[string]string{"a": "1", "b": "2"},
		},
		{
			name:  "last journal torn: cut off",
			files: map[string][]byte{journalName(1): journal(1, ab...)[:size(journal(1, ab...))-3]},
			want:  map[string]string{"a": "1"}, size: jat(1, ab...),
		},
		{
			name:  "last journal torn, zeros after: cut off",
			files: map[string][]byte{journalName(1): append(journal(1, ab...)[:size(journal(1, ab...))-3], zeros...)},
			want:  map[string]string{"a": "1"}, size: jat(1, ab...),
		},
		{
			// The kernel writes a batch's pages back in no set order: a
			// crash can keep a later page of the last batch and lose an
			// earlier one.
			name:  "last batch torn in its middle, data after: cut off",
			files: map[string][]byte{journalName(1): append(append(journal(1, ab...)[:size(journal(1, ab...))-3], zeros...), "later page"...)},
			want:  map[string]string{"a": "1"}, size: jat(1, ab...),
		},
		{
			name:    "a record's length changed, a batch after it",
			files:   map[string][]byte{journalName(1): flip(journal(1, put("a", "1"), put("b", "2"), put("c", "3")), int(jat(1, ab...))+3)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: record fields do not add up", jat(1, ab...)),
		},
		{
			name:    "zeros, then a batch in its place",
			files:   map[string][]byte{journalName(1): batch(append(journal(1, ab...), zeros...), put("c", "3"))},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: record fields do not add up", size(journal(1, ab...))),
		},
		{
			name:    "a batch header out of its place",
			files:   map[string][]byte{journalName(1): append(journal(1, put("a", "1")), journal(1, put("b", "2"))[headerSize:]...)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: batch header out of place", jat(1, ab...)-batchHeaderSize),
		},
		{
			name:    "a batch header in a batchless journal",
			files:   map[string][]byte{journalName(1): append(batchless(1, ab...), journal(1, put("c", "3"))[headerSize:]...)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: batch header out of place", at(2, ab...)),
		},
		{
			name:  "batchless journal of an earlier build",
			files: map[string][]byte{journalName(1): append(batchless(1, ab...), zeros...)},
			want:  map[string]string{"a": "1", "b": "2"},
		},
		{
			name:  "batchless journal torn: cut off",
			files: map[string][]byte{journalName(1): batchless(1, ab...)[:at(2, ab...)-3]},
			want:  map[string]string{"a": "1"}, size: at(1, ab...),
		},
		{
			name:    "batchless journal, zeros then data",
			files:   map[string][]byte{journalName(1): append(append(batchless(1, ab...), zeros...), batchless(1, ab...)...)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d:", at(2, ab...)),
		},
		{
			name:  "last journal created, its header never written: removed",
			files: map[string][]byte{journalName(1): journal(1, ab...), journalName(2): make([]byte, headerSize+4096)},
			want:  map[string]string{"a": "1", "b": "2"}, size: headerSize,
		},
		{
			name:    "a journal's header zeros, with data after it",
			files:   map[string][]byte{journalName(1): journal(1, ab...), journalName(2): append(make([]byte, headerSize), journal(2, ab...)[headerSize:]...)},
			damaged: journalName(2), why: "offset 0: header is not this file's",
		},
		{
			name:  "last journal cut off in its header: removed",
			files: map[string][]byte{journalName(1): journal(1, ab...), journalName(2): make([]byte, 5)},
			want:  map[string]string{"a": "1", "b": "2"}, size: headerSize,
		},
		{
			name:    "earlier journal torn",
			files:   map[string][]byte{journalName(1): journal(1, ab...)[:size(journal(1, ab...))-3], journalName(2): journal(2)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: record cut short", jat(1, ab...)),
		},
		{
			name:    "record changed",
			files:   map[string][]byte{journalName(1): flip(journal(1, put("a", "1"), put("b", "2"), put("c", "3")), int(jat(1, ab...))+frameSize+2)},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: record checksum does not match", jat(1, ab...)),
		},
		{
			name:    "header of another file",
			files:   map[string][]byte{journalName(1): journal(2, ab...)},
			damaged: journalName(1), why: "offset 0: header is not this file's",
		},
		{
			name:    "snapshot without its end",
			files:   map[string][]byte{snapName(1): snap(1, ab...)},
			damaged: snapName(1), why: fmt.Sprintf("offset %d: snapshot cut short", at(2, ab...)),
		},
		{
			name:    "snapshot's end miscounted",
			files:   map[string][]byte{snapName(1): snap(1, put("a", "1"), end(2))},
			damaged: snapName(1), why: fmt.Sprintf("offset %d: end record out of place", at(1, ab...)),
		},
		{
			name:    "data after the snapshot's end",
			files:   map[string][]byte{snapName(1): snap(1, put("a", "1"), end(1), put("b", "2"))},
			damaged: snapName(1), why: fmt.Sprintf("offset %d: data after the snapshot's end", at(2, put("a", "1"), end(1))),
		},
		{
			name:    "end record in a journal",
			files:   map[string][]byte{journalName(1): journal(1, put("a", "1"), end(1))},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: end record out of place", jat(1, ab...)),
		},
		{
			name:    "end record in the last journal, then a torn write",
			files:   map[string][]byte{journalName(1): journal(1, put("a", "1"), end(1), put("b", "2"))[:size(journal(1, put("a", "1"), end(1), put("b", "2")))-3]},
			damaged: journalName(1), why: fmt.Sprintf("offset %d: end record out of place", jat(1, ab...)),
		},
		{
			name:    "a length past any record's",
			files:   map[string][]byte{snapName(1): append(snap(1, ab...), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)},
			damaged: snapName(1), why: fmt.Sprintf("offset %d: record fields do not add up", at(2, ab...)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var last string
			for name, b := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
					t.Fatal(err)
				}
				last = max(last, name)
			}
			quiet := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			db, err := Open(dir, quiet)
			if tt.damaged != "" {
				want := filepath.Join(dir, tt.damaged) + " is damaged at " + tt.why
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("Open = %v; want an error with %q", err, want)
				}
				for name, b := range tt.files {
					if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, b) {
						t.Errorf("%s changed by a start that refused it", name)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Open = %v; want nil", err)
			}
			if tt.size != 0 {
				fi, err := os.Stat(filepath.Join(dir, last))
				if err != nil || fi.Size() != tt.size {
					t.Errorf("%s: %v, %v; want %d bytes", last, fi, err, tt.size)
				}
			}
			// What the start read, and again after a stop and a second
			// start on what the first left.
			for i := range 2 {
				got := map[string]string{}
				for k, e := range db.all() {
					got[k] = string(e)
				}
				if !maps.Equal(got, tt.want) {
					t.Errorf("start %d: entries %v; want %v", i+1, short(got), short(tt.want))
				}
				if members := db.members("s"); !slices.Equal(members, tt.set) {
					t.Errorf("start %d: set s: %q; want %q", i+1, members, tt.set)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					if db, err = Open(dir, quiet); err != nil {
						t.Fatalf("second Open = %v; want nil", err)
					}
				}
			}
		})
	}
}

func flip(b []byte, off int) []byte {
	b[off] ^= 0x40
	return b
}

// all returns every entry in memory, expired or not.
func (db *DB) all() map[string][]byte {
	m := map[string][]byte{}
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			m[k] = e.val
		}
		sh.mu.Unlock()
	}
	return m
}

// members returns the members of set, lowest score first.
func (db *DB) members(set string) []string {
	db.setsMu.Lock()
	defer db.setsMu.Unlock()
	var ms []string
	if z := db.sets[set]; z != nil {
		for _, x := range z.order() {
			ms = append(ms, x.Member)
		}
	}
	return ms
}

// short shows a map with its long values cut.
func short(m map[string]string) map[string]string {
	s := map[string]string{}
	for k, v := range m {
		if len(v) > 20 {
			v = fmt.Sprintf("%s… (%d bytes)", v[:10], len(v))
		}
		s[k] = v
	}
	return s
}

// TestFileChangedBetweenReads: a start reads each file twice; a record
// changed in between (same lengths, so the framing holds) is refused at
// the second read, not applied unchecked.
func TestFileChangedBetweenReads(t *testing.T) {
	db := openT(t, t.TempDir(), Options{})
	defer db.Close()
	path := filepath.Join(t.TempDir(), journalName(1))
	b := appendRecord(header(journalMagic, 1), record{op: opPut, key: "a", val: []byte("good")})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var counts [numShards]int
	c, err := db.check(path, stateFile{name: journalName(1), gen: 1}, true, db.nowNano(), &counts)
	if err != nil {
		t.Fatalf("check = %v; want nil", err)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte("good"), []byte("evil"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	err = db.applyAll([]checkedFile{c}, db.nowNano(), &counts)
	if err == nil || !strings.Contains(err.Error(), "changed while it was read") || strings.Contains(err.Error(), "\n") {
		t.Errorf("applyAll after a change = %v; want one line saying the file changed", err)
	}
	if v, ok := db.all()["a"]; ok {
		t.Errorf("a = %q applied from a changed file", v)
	}
}
