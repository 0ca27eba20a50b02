package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The files of a directory: snapshot-G holds the whole state as it was at
// some moment after journal-G was started; journal-G, journal-G+1, … hold
// the changes after that, in order. A start reads the newest snapshot and
// the journals from its generation on (all journals when there is no
// snapshot). Each file opens with a header: its magic, its generation,
// and a CRC-32C of both.
const (
	journalMagic = "DLJRNL01"
	snapMagic    = "DLSNAP01"
	headerSize   = 8 + 8 + 4
	journalStem  = "journal-"
	snapStem     = "snapshot-"
	tmpSuffix    = ".tmp"
)

func journalName(gen uint64) string { return fmt.Sprintf("%s%016x", journalStem, gen) }
func snapName(gen uint64) string    { return fmt.Sprintf("%s%016x", snapStem, gen) }

func header(magic string, gen uint64) []byte {
	b := append([]byte(magic), make([]byte, 8)...)
	binary.LittleEndian.PutUint64(b[8:], gen)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// createFile creates name in dir with its header, fsynced with the
// directory: once it returns, the file is there after a crash.
func createFile(dir, name, magic string, gen uint64) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err = f.Write(header(magic, gen)); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeSnapshot writes the state in memory as snapshot-gen: to a
// temporary file, fsynced, renamed, the directory fsynced. It takes each
// shard's lock in turn, never all at once. It returns the file's size.
func writeSnapshot(db *DB, dir string, gen uint64) (int64, error) {
	tmp, err := os.CreateTemp(dir, snapName(gen)+"-*"+tmpSuffix)
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // once renamed, a no-op
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return 0, err
	}
	w := bufio.NewWriterSize(tmp, 1<<20)
	w.Write(header(snapMagic, gen))
	var buf []byte
	var n int64
	put := func(r record) {
		buf = appendRecord(buf[:0], r)
		w.Write(buf)
		n++
	}
	now := db.nowNano()
	for i := range db.shards {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.liveAt(now) {
				put(record{op: opPut, key: k, val: e.val, n: e.exp})
			}
		}
		sh.mu.Unlock()
	}
	db.setsMu.Lock()
	for name, z := range db.sets {
		for _, x := range z.order() {
			put(record{op: opZAdd, key: name, member: x.Member, n: x.Score})
		}
	}
	db.setsMu.Unlock()
	put(record{op: opEnd, n: n})
	err = w.Flush()
	if err == nil {
		err = tmp.Sync()
	}
	size, _ := tmp.Seek(0, io.SeekCurrent)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, snapName(gen)))
	}
	if err == nil {
		err = syncDir(dir)
	}
	return size, err
}

// removeBefore removes the snapshots and journals older than gen, which
// snapshot-gen makes redundant.
func removeBefore(dir string, gen uint64, log *slog.Logger) {
	files, err := listFiles(dir)
	if err != nil {
		log.Warn("store: listing old files to remove failed", "err", err)
		return
	}
	for _, f := range files {
		if f.gen < gen {
			if err := os.Remove(filepath.Join(dir, f.name)); err != nil {
				log.Warn("store: removing an old file failed", "err", err)
			}
		}
	}
}

type stateFile struct {
	name string
	gen  uint64
	snap bool
}

// listFiles returns dir's snapshots and journals, oldest first (at one
// generation, the snapshot first). Temporary files are left to Open.
func listFiles(dir string) ([]stateFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []stateFile
	for _, e := range ents {
		name := e.Name()
		for _, stem := range []string{journalStem, snapStem} {
			hex, ok := strings.CutPrefix(name, stem)
			if !ok || len(hex) != 16 {
				continue
			}
			if gen, err := strconv.ParseUint(hex, 16, 64); err == nil {
				files = append(files, stateFile{name: name, gen: gen, snap: stem == snapStem})
			}
		}
	}
	slices.SortFunc(files, func(a, b stateFile) int {
		if a.gen != b.gen {
			if a.gen < b.gen {
				return -1
			}
			return 1
		}
		if a.snap == b.snap {
			return 0
		}
		if a.snap {
			return -1
		}
		return 1
	})
	return files, nil
}

// openJournal restores dir's state into db and opens a new journal file
// after it.
func openJournal(db *DB, dir string, o Options) (*journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, snapStem+"*"+tmpSuffix)); len(tmps) > 0 {
		for _, t := range tmps { // a snapshot a crash cut off: its journals are whole
			os.Remove(t)
		}
	}
	files, err := listFiles(dir)
	if err != nil {
		return nil, err
	}
	// The newest snapshot, and the journals from its generation on.
	base := -1
	for i, f := range files {
		if f.snap {
			base = i
		}
	}
	read := files
	if base >= 0 {
		read = files[base:]
	}
	// The journals must follow on from the snapshot, or from the first
	// generation, without a gap: a missing file is missing changes.
	next := uint64(1)
	var replayed int64
	var recs [][]record // each file's
	for i, f := range read {
		if f.snap {
			next = f.gen
		} else if f.gen != next {
			return nil, fmt.Errorf("%s: %s is missing; restore the directory from a backup", filepath.Join(dir, f.name), journalName(next))
		}
		r, err := db.load(dir, f, i == len(read)-1)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
		if !f.snap {
			next = f.gen + 1
			if fi, err := os.Stat(filepath.Join(dir, f.name)); err == nil {
				replayed += fi.Size()
			}
		}
	}
	db.applyAll(recs)
	db.live.Store(0)
	now := db.nowNano()
	for i := range db.shards {
		for k, e := range db.shards[i].m {
			if !e.liveAt(now) {
				delete(db.shards[i].m, k)
			}
		}
		db.live.Add(int64(len(db.shards[i].m)))
	}
	f, err := createFile(dir, journalName(next), journalMagic, next)
	if err != nil {
		return nil, err
	}
	j := &journal{
		db:       db,
		dir:      dir,
		interval: o.Durability == Interval,
		foldAt:   o.FoldAt,
		cur:      newBatch(),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		f:        f,
		gen:      next,
		size:     headerSize,
		alloc:    headerSize,
		replayed: replayed,
	}
	if j.foldAt <= 0 {
		j.foldAt = 64 << 20
	}
	if base >= 0 {
		if fi, err := os.Stat(filepath.Join(dir, files[base].name)); err == nil {
			j.snapSize.Store(fi.Size())
		}
	}
	db.bg.Add(1)
	go func() {
		defer db.bg.Done()
		j.writer()
	}()
	return j, nil
}

// damage is the one line a start refuses with.
func damage(path string, off int64, why error) error {
	return fmt.Errorf("%s is damaged at offset %d: %v; restore the directory from a backup (its files are read in order: none can be left out)", path, off, why)
}

// load checks and decodes the records of f. In the last journal (last), a
// record cut short at the end, or followed by nothing but zeros, is a
// write a crash interrupted: it is dropped with a warning and the file cut
// there. Anywhere else, a bad record is damage.
func (db *DB) load(dir string, f stateFile, last bool) ([]record, error) {
	path := filepath.Join(dir, f.name)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	magic := journalMagic
	if f.snap {
		magic = snapMagic
	}
	if len(b) < headerSize {
		if last && !f.snap && allZero(b) {
			db.log.Warn("store: dropping a journal a crash cut off as it was created", "file", path)
			return nil, os.Remove(path)
		}
		return nil, damage(path, 0, errors.New("header cut short"))
	}
	if string(b[:headerSize]) != string(header(magic, f.gen)) {
		return nil, damage(path, 0, errors.New("header is not this file's"))
	}
	return db.readRecords(b, path, f, last)
}

// readRecords checks and decodes the records of b, the file at path: a
// first pass finds where each record starts from the lengths alone, then
// two goroutines check and decode half of them each, into a slice made at
// its size. The first bad record, in file order, decides.
func (db *DB) readRecords(b []byte, path string, f stateFile, last bool) ([]record, error) {
	var offs []int
	bad := -1 // where the framing stops making sense, if it does
	for off := headerSize; off < len(b); {
		if !f.snap && b[off] == 0 && allZero(b[off:]) {
			break // the zeros a journal is filled with ahead of its records
		}
		size, ok := framedSize(b[off:])
		if !ok {
			bad = off
			break
		}
		offs = append(offs, off)
		off += size
	}
	recs := make([]record, len(offs))
	const workers = 2
	var firstBad [workers]int // in each worker's part, the first bad record's index
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			firstBad[w] = -1
			for i := w * len(offs) / workers; i < (w+1)*len(offs)/workers; i++ {
				r, _, err := nextRecord(b[offs[i]:])
				if err != nil {
					firstBad[w] = i
					return
				}
				r.shard = uint8(maphash.String(db.seed, r.key) % numShards)
				recs[i] = r
			}
		}()
	}
	wg.Wait()
	for _, i := range firstBad {
		if i >= 0 {
			bad, recs = offs[i], recs[:i]
			break
		}
	}
	if bad >= 0 {
		_, _, err := nextRecord(b[bad:])
		// The last record written, cut short: its bytes reach the end of
		// the file, or all that follows where it says it ends are the
		// zeros the journal is filled with ahead (a write of several
		// records that only partly reached the disk).
		n, framed := framedSize(b[bad:])
		torn := errors.Is(err, errShort) || tornAt(b[bad:]) || framed && allZero(b[bad+n:])
		if last && !f.snap && torn {
			db.log.Warn("store: dropping the end of the journal, cut short by a crash", "file", path, "offset", bad, "bytes", len(b)-bad)
			return recs, truncate(path, int64(bad))
		}
		return nil, damage(path, int64(bad), err)
	}
	for i, r := range recs {
		if r.op != opEnd {
			continue
		}
		if !f.snap || r.n != int64(i) {
			return nil, damage(path, int64(offs[i]), errors.New("end record out of place"))
		}
		if i != len(recs)-1 {
			return nil, damage(path, int64(offs[i+1]), errors.New("data after the snapshot's end"))
		}
		return recs[:i], nil
	}
	if f.snap {
		return nil, damage(path, int64(len(b)), errors.New("snapshot cut short"))
	}
	return recs, nil
}

// applyAll applies the records of the files read, in order, in memory at
// load: the shards' maps made at their size first, then each half of the
// shards by a goroutine of its own, each key's records in their order.
// Sets are applied after.
func (db *DB) applyAll(files [][]record) {
	var counts [numShards]int
	for _, recs := range files {
		for _, r := range recs {
			if r.op == opPut || r.op == opDel {
				counts[r.shard]++
			}
		}
	}
	for i := range db.shards {
		if len(db.shards[i].m) == 0 && counts[i] > 0 {
			db.shards[i].m = make(map[string]entry, counts[i])
		}
	}
	const workers = 2
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, recs := range files {
				for _, r := range recs {
					if (r.op == opPut || r.op == opDel) && int(r.shard)%workers == w {
						db.applyKV(&db.shards[r.shard], r)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, recs := range files {
		for _, r := range recs {
			if r.op == opZAdd || r.op == opZRem {
				db.applySet(r)
			}
		}
	}
}

// tornAt reports whether the bad record at the start of b is the last
// one: its length reaches the end of b.
func tornAt(b []byte) bool {
	n := binary.LittleEndian.Uint32(b)
	return uint64(frameSize)+uint64(n) >= uint64(len(b))
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

// applyKV makes r's change to sh in memory, at load; expired entries are
// dropped once loading is done.
func (db *DB) applyKV(sh *shard, r record) {
	if r.op == opPut {
		sh.m[r.key] = entry{val: slices.Clone(r.val), exp: r.n}
	} else {
		delete(sh.m, r.key)
	}
}

// applySet makes r's change to a set in memory, at load.
func (db *DB) applySet(r record) {
	switch r.op {
	case opZAdd:
		db.setLocked(r.key, true).add(r.member, r.n)
	case opZRem:
		if z := db.setLocked(r.key, false); z != nil && z.remove(r.member) && len(z.score) == 0 {
			delete(db.sets, r.key)
		}
	}
}
