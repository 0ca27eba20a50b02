package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"strings"
	"sync"
)

// A start reads each file twice through a small buffer, never whole:
// first to check it (check), then to apply it (applyAll). Reading a file
// again from the page cache costs far less than the memory a whole copy
// of it would take first.

// readBuf is the buffer a file is read through; a larger record gets a
// larger one.
const readBuf = 1 << 20

// checkedFile is a file check found whole up to end: the records in
// [headerSize, end) are to be applied.
type checkedFile struct {
	path    string
	end     int64
	size    int64 // the file's, once checked (a torn tail cut off)
	removed bool  // a journal a crash cut off in its header: its generation is free again
}

// damage is the one line a start refuses with.
func damage(path string, off int64, why error) error {
	return fmt.Errorf("%s is damaged at offset %d: %v; restore the directory from a backup (its files are read in order: none can be left out)", path, off, why)
}

// check reads f, at path, and checks its header and records, adding to
// counts the puts of each shard still live at now. In the last journal
// (last), a record cut short at the end, or followed by nothing but
// zeros, is a write a crash interrupted: it is dropped with a warning and
// the file cut there. Anywhere else, a bad record is damage. A snapshot's
// records end at its end record.
func (db *DB) check(path string, f stateFile, last bool, now int64, counts *[numShards]int) (checkedFile, error) {
	c := checkedFile{path: path}
	fh, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return c, err
	}
	c.size = fi.Size()
	magic := journalMagic
	if f.snap {
		magic = snapMagic
	}
	if c.size < headerSize {
		b, err := io.ReadAll(fh)
		if err != nil {
			return c, err
		}
		if last && !f.snap && allZero(b) {
			db.log.Warn("store: dropping a journal a crash cut off as it was created", "file", path)
			c.size, c.removed = 0, true
			return c, os.Remove(path)
		}
		return c, damage(path, 0, errors.New("header cut short"))
	}
	hdr := make([]byte, headerSize)
	if _, err := io.ReadFull(fh, hdr); err != nil {
		return c, err
	}
	batched := true
	if !bytes.Equal(hdr, header(magic, f.gen)) {
		if last && !f.snap && allZero(hdr) {
			// Created, and its size on disk before its header (some file
			// systems keep them so): nothing was appended to it, as its
			// header is synced first.
			if zero, err := zeroFrom(fh, headerSize, c.size); err != nil || zero {
				if err == nil {
					db.log.Warn("store: dropping a journal a crash cut off as it was created", "file", path)
					c.size, c.removed = 0, true
					err = os.Remove(path)
				}
				return c, err
			}
		}
		if f.snap || !bytes.Equal(hdr, header(batchless, f.gen)) {
			return c, damage(path, 0, errors.New("header is not this file's"))
		}
		batched = false
	}

	// The records, in order: the first bad one decides, then the end
	// record's place.
	var (
		n       int64 // records before the current one
		endAt   int64 = -1
		endErr  error // the first misplaced end record, or a record after it
		shardOf [numShards]int
	)
	stop, err := eachRecord(fh, headerSize, func(off int64, rec []byte) bool {
		r, _, err := nextRecord(rec)
		if err != nil {
			return false
		}
		switch {
		case endErr != nil:
		case endAt >= 0:
			endErr = damage(path, off, errors.New("data after the snapshot's end"))
		case r.op == opEnd && (!f.snap || r.n != n):
			endErr = damage(path, off, errors.New("end record out of place"))
		case r.op == opBatch && (!batched || r.at != off):
			endErr = damage(path, off, errors.New("batch header out of place"))
		case r.op == opEnd:
			endAt = off
		case r.op == opPut && live(r, now):
			shardOf[maphash.String(db.seed, r.key)%numShards]++
		}
		n++
		return true
	})
	if err != nil {
		return c, err
	}
	if endErr != nil {
		return c, endErr // refused as it is, whatever its end holds
	}
	c.end = stop
	if stop < c.size {
		if c.size, err = db.tail(fh, path, f, last && batched, last && !batched, stop, c.size); err != nil {
			return c, err
		}
	}
	if f.snap {
		if endAt < 0 {
			return c, damage(path, c.size, errors.New("snapshot cut short"))
		}
		c.end = endAt
	}
	for i, k := range shardOf {
		counts[i] += k
	}
	return c, nil
}

// tail decides what the bytes of f, at path, from stop (where its records
// stop holding) to its end are, and returns the file's size after:
//   - zeros, what a journal is filled with ahead of its records: kept;
//   - in the last journal (last), a write a crash cut short: dropped with a
//     warning, the file cut at stop. A batch is written only once the one
//     before it is on disk, so a crash can cut short only the last batch,
//     in any of its pages (the kernel writes pages back in no set order):
//     that is what follows stop when no batch header comes after it;
//   - in the last journal of an earlier build (lastBatchless), which has no
//     batch headers: when the record at stop runs past the end of the file,
//     or all that follows where it says it ends is zeros;
//   - anything else: damage.
func (db *DB) tail(fh *os.File, path string, f stateFile, last, lastBatchless bool, stop, size int64) (int64, error) {
	rest := size - stop
	head := make([]byte, min(rest, frameSize))
	if _, err := fh.ReadAt(head, stop); err != nil {
		return size, err
	}
	if !f.snap && head[0] == 0 {
		if zero, err := zeroFrom(fh, stop, size); err != nil || zero {
			return size, err // zeros: the end of what was written
		}
	}
	var n int64 // the length the record at stop says it has
	if len(head) == frameSize {
		n = int64(binary.LittleEndian.Uint32(head))
	}
	framed := n > 0 && n <= maxRecord
	if framed {
		head = make([]byte, min(rest, frameSize+n))
		if _, err := fh.ReadAt(head, stop); err != nil {
			return size, err
		}
	}
	_, _, bad := nextRecord(head)
	torn := false
	switch {
	case f.snap: // written whole, then renamed: never cut short
	case last:
		later, err := batchAfter(fh, stop+1, size)
		if err != nil {
			return size, err
		}
		torn = !later
	case lastBatchless:
		torn = errors.Is(bad, errShort) || frameSize+n >= rest
		if !torn && framed {
			zero, err := zeroFrom(fh, stop+frameSize+n, size)
			if err != nil {
				return size, err
			}
			torn = zero
		}
	}
	if !torn {
		return size, damage(path, stop, bad)
	}
	db.log.Warn("store: dropping the end of the journal, cut short by a crash", "file", path, "offset", stop, "bytes", rest)
	return stop, truncate(path, stop)
}

// batchAfter reports whether f holds a batch header, whole and in its
// place, at an offset in [from, end).
func batchAfter(f *os.File, from, end int64) (bool, error) {
	frame := binary.LittleEndian.AppendUint32(nil, batchHeaderSize-frameSize)
	buf := make([]byte, readBuf)
	for off := from; off < end; off += int64(len(buf) - (batchHeaderSize - 1)) {
		b := buf[:min(int64(len(buf)), end-off)]
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return false, err
		}
		for i := 0; ; i++ {
			k := bytes.Index(b[i:], frame)
			if k < 0 || i+k+batchHeaderSize > len(b) {
				break
			}
			i += k
			if r, _, err := nextRecord(b[i : i+batchHeaderSize]); err == nil && r.op == opBatch && r.at == off+int64(i) {
				return true, nil
			}
		}
		if int64(len(b)) < int64(len(buf)) {
			break
		}
	}
	return false, nil
}

// zeroFrom reports whether the bytes of f in [off, end) are all zeros.
func zeroFrom(f *os.File, off, end int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for off < end {
		b := buf[:min(int64(len(buf)), end-off)]
		if _, err := f.ReadAt(b, off); err != nil {
			return false, err
		}
		if !allZero(b) {
			return false, nil
		}
		off += int64(len(b))
	}
	return true, nil
}

// eachRecord reads r, which is at offset off of its file, through a
// buffer and calls fn with each framed record in turn, whole, until fn
// returns false. It returns the offset where it stopped: the end of r, a
// record fn refused, or where the framing stops holding (a length that is
// no record's, or one that runs past the end). rec is valid only during
// the call.
func eachRecord(r io.Reader, off int64, fn func(off int64, rec []byte) bool) (int64, error) {
	buf := make([]byte, readBuf)
	start, end := 0, 0 // buf[start:end]: read, not yet passed to fn
	eof := false
	fill := func() error {
		end = copy(buf, buf[start:end])
		start = 0
		k, err := io.ReadAtLeast(r, buf[end:], 1)
		end += k
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			eof = true
			return nil
		}
		return err
	}
	for {
		if end-start < frameSize && !eof {
			if err := fill(); err != nil {
				return off, err
			}
			continue
		}
		if end-start < frameSize {
			return off, nil
		}
		n := binary.LittleEndian.Uint32(buf[start:])
		if n == 0 || n > maxRecord {
			return off, nil
		}
		size := frameSize + int(n)
		if end-start < size {
			if eof {
				return off, nil
			}
			if size > len(buf) {
				buf = append(buf[:end], make([]byte, size-end)...)
			}
			if err := fill(); err != nil {
				return off, err
			}
			continue
		}
		if !fn(off, buf[start:start+size]) {
			return off, nil
		}
		start += size
		off += int64(size)
	}
}

// applyAll applies the records of the files check found whole, in order,
// in memory: two goroutines, each sizing the maps of its half of the
// shards once (counts: their live puts), then reading every file and
// applying the changes to its shards (the first also the sets'), so each
// key's changes are made in their order. A put expired at now is applied
// as a delete: after downtime longer than the codes live, a start need
// not build what it would drop at once.
func (db *DB) applyAll(files []checkedFile, now int64, counts *[numShards]int) error {
	const workers = 2
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < numShards; i += workers {
				if len(db.shards[i].m) == 0 && counts[i] > 0 {
					db.shards[i].m = make(map[string]entry, counts[i])
				}
			}
			for _, f := range files {
				if errs[w] = db.applyFile(f, now, w, workers); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err // the workers read the same files: one says it
		}
	}
	return nil
}

// applyFile applies worker w's records of f.
func (db *DB) applyFile(f checkedFile, now int64, w, workers int) error {
	if f.end <= headerSize {
		return nil
	}
	fh, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer fh.Close()
	r := io.NewSectionReader(fh, headerSize, f.end-headerSize)
	stop, err := eachRecord(r, headerSize, func(_ int64, rec []byte) bool {
		r, _, err := nextRecord(rec) // checked again: the file may have changed since
		if err != nil {
			return false
		}
		switch r.op {
		case opPut, opDel:
			if sh := maphash.String(db.seed, r.key) % numShards; int(sh)%workers == w {
				db.applyKV(&db.shards[sh], r, now)
			}
		case opZAdd, opZRem:
			if w == 0 {
				db.applySet(r)
			}
		}
		return true
	})
	if err == nil && stop != f.end {
		err = fmt.Errorf("%s changed while it was read, at offset %d", f.path, stop)
	}
	return err
}

func allZero(b []byte) bool {
	var zeros [4096]byte
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// applyKV makes r's change to sh in memory, at load: a put expired at
// now deletes, as the entry would be dropped once loading is done. r's
// strings alias the read buffer.
func (db *DB) applyKV(sh *shard, r record, now int64) {
	if r.op == opPut && live(r, now) {
		sh.m[strings.Clone(r.key)] = entry{val: bytes.Clone(r.val), exp: r.n}
	} else {
		delete(sh.m, r.key)
	}
}

// live reports whether the entry put by r is live at now.
func live(r record, now int64) bool { return entry{exp: r.n}.liveAt(now) }

// applySet makes r's change to a set in memory, at load. r's strings
// alias the read buffer.
func (db *DB) applySet(r record) {
	switch r.op {
	case opZAdd:
		db.setLocked(strings.Clone(r.key), true).add(strings.Clone(r.member), r.n)
	case opZRem:
		if z := db.setLocked(r.key, false); z != nil && z.remove(r.member) && len(z.score) == 0 {
			delete(db.sets, r.key)
		}
	}
}
