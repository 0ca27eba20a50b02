package embedded

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The files of a directory: snapshot-G holds the whole state as it was at
// some moment after journal-G was started; journal-G, journal-G+1, … hold
// the changes after that, in order. A start reads the newest snapshot and
// the journals from its generation on (all journals when there is no
// snapshot). Each file opens with a header: its magic, its generation,
// and a CRC-32C of both.
const (
	journalMagic = "DLJRNL02" // its records in batches, each with its header
	batchless    = "DLJRNL01" // a journal of the builds before batch headers
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
		for m, sc := range z.score { // any order: a load adds them one by one
			put(record{op: opZAdd, key: name, member: m, n: sc})
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
	loadAt := db.nowNano()
	var checked []checkedFile
	var counts [numShards]int // the live puts of each shard, to size its map once
	for i, f := range read {
		if f.snap {
			next = f.gen
		} else if f.gen != next {
			return nil, fmt.Errorf("%s: %s is missing; restore the directory from a backup", filepath.Join(dir, f.name), journalName(next))
		}
		c, err := db.check(filepath.Join(dir, f.name), f, i == len(read)-1, loadAt, &counts)
		if err != nil {
			return nil, err
		}
		checked = append(checked, c)
		if !f.snap && !c.removed {
			next = f.gen + 1
			replayed += c.size
		}
	}
	if err := db.applyAll(checked, loadAt, &counts); err != nil {
		return nil, err
	}
	// Entries that expired during the load are the sweeper's, as any.
	db.live.Store(0)
	for i := range db.shards {
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
		cur:      newBatch(make([]byte, 0, 4<<10)),
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
