package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"deeplink/internal/store"
)

// Builds before the journal kept the sign-in state in 64 shards, each a
// snapshot (store-XX.snap) and a log of the changes since (store-XX.log),
// and a mark of a clean stop (store.clean). The first start of this build
// on such a data_dir reads them once into the store, then moves them into
// data_dir/earlier-build/, where they stay until the operator removes
// them (a way back to the earlier build, with a copy of the rest).

const (
	legacyPrefix    = "store-"
	legacyShards    = 64
	legacyClean     = "store.clean"
	legacyMovedDir  = "earlier-build"
	legacySnapMagic = "DLSNAP2\n"
)

func legacyPaths(dir string, i int) (snap, log string) {
	base := filepath.Join(dir, fmt.Sprintf(legacyPrefix+"%02x", i))
	return base + ".snap", base + ".log"
}

// importLegacy copies the live entries of an earlier build's files in dir
// into st and moves the files away. It does nothing when there are none.
// A damaged file stops it, as it would have stopped the earlier build.
func importLegacy(dir string, st store.Store, now time.Time, log *slog.Logger) error {
	var found []string
	entries := map[Key]legacyEntry{}
	for i := range legacyShards {
		snap, logf := legacyPaths(dir, i)
		epoch := uint64(0)
		if b, err := os.ReadFile(snap); err == nil {
			found = append(found, snap)
			epoch, err = decodeSnapshot(b, func(k Key, exp int64, val []byte) { entries[k] = legacyEntry{exp, val} })
			if err != nil {
				return fmt.Errorf("importing %s: %w", snap, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("importing %s: %w", snap, err)
		}
		b, err := os.ReadFile(logf)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return fmt.Errorf("importing %s: %w", logf, err)
		}
		found = append(found, logf)
		_, _, err = replayLog(b, func(put bool, k Key, exp int64, val []byte) {
			if put {
				entries[k] = legacyEntry{exp, val}
			} else {
				delete(entries, k)
			}
		}, epoch)
		if err != nil && !errors.Is(err, errStaleLog) {
			return fmt.Errorf("importing %s: %w", logf, err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	// In batches: one durable write for many entries, not one each.
	var ws []store.Write
	n := 0
	for k, e := range entries {
		if e.exp <= now.UnixNano() {
			continue
		}
		ws = append(ws, store.Write{Key: k.name(), Val: e.val, Exp: time.Unix(0, e.exp)})
		n++
		if len(ws) == importBatch {
			if err := st.Apply(context.Background(), ws); err != nil {
				return fmt.Errorf("importing an earlier build's state: %w", err)
			}
			ws = ws[:0]
		}
	}
	if err := st.Apply(context.Background(), ws); err != nil {
		return fmt.Errorf("importing an earlier build's state: %w", err)
	}
	moved := filepath.Join(dir, legacyMovedDir)
	if err := os.MkdirAll(moved, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, legacyClean)); err == nil {
		found = append(found, filepath.Join(dir, legacyClean))
	}
	for _, f := range found {
		if err := os.Rename(f, filepath.Join(moved, filepath.Base(f))); err != nil {
			return fmt.Errorf("importing an earlier build's state: %w", err)
		}
	}
	log.Info("store: imported the state of an earlier build; its files are in "+moved+" (remove them once this build runs well)", "entries", n)
	return nil
}

// importBatch is how many entries one Apply of importLegacy writes.
const importBatch = 4096

type legacyEntry struct {
	exp int64
	val []byte
}

var errBadSnapshot = errors.New("snapshot is truncated or corrupt")

// decodeSnapshot calls fn for each record of the snapshot b, in order, and
// returns the snapshot's epoch. The values passed to fn are fresh copies.
// It returns errBadSnapshot, having called fn for no record, when b is not
// a whole, intact snapshot.
func decodeSnapshot(b []byte, fn func(k Key, exp int64, val []byte)) (epoch uint64, err error) {
	if len(b) < len(legacySnapMagic)+2+4 || string(b[:len(legacySnapMagic)]) != legacySnapMagic {
		return 0, errBadSnapshot
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return 0, errBadSnapshot
	}
	p := body[len(legacySnapMagic):]
	epoch, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, errBadSnapshot
	}
	p = p[n:]
	count, n := binary.Uvarint(p)
	if n <= 0 || count > uint64(len(p)/(len(Key{})+2)) {
		return 0, errBadSnapshot
	}
	p = p[n:]
	// First pass checks the framing, so fn sees all records or none.
	q := p
	for range count {
		if len(q) < len(Key{}) {
			return 0, errBadSnapshot
		}
		q = q[len(Key{}):]
		if _, n := binary.Varint(q); n <= 0 {
			return 0, errBadSnapshot
		} else {
			q = q[n:]
		}
		l, n := binary.Uvarint(q)
		if n <= 0 || l > uint64(len(q)-n) {
			return 0, errBadSnapshot
		}
		q = q[n+int(l):]
	}
	if len(q) != 0 {
		return 0, errBadSnapshot
	}
	vals := make([]byte, 0, len(p)) // one allocation backs every value
	for range count {
		var k Key
		copy(k[:], p)
		p = p[len(k):]
		exp, n := binary.Varint(p)
		p = p[n:]
		l, n := binary.Uvarint(p)
		p = p[n:]
		start := len(vals)
		vals = append(vals, p[:l]...)
		p = p[l:]
		fn(k, exp, vals[start:len(vals):len(vals)])
	}
	return epoch, nil
}

// Log format, one file per shard, continuing the snapshot of the same
// epoch:
//
//	"DLLOG2\n\x00" epoch(8, big-endian) crc32be(magic and epoch) then records:
//	uvarint(len) payload[len] crc32be(payload)
//	payload: 'P' key[32] varint(exp) val…   a put
//	         'D' key[32]                     a delete
//
// The header's checksum tells a damaged epoch from an older one: a log
// older than its snapshot, which a cut compaction leaves, is skipped, so an
// epoch damaged to a smaller number would otherwise drop the whole log
// without a word. Logs of builds before it ("DLLOG1\n\x00", no checksum)
// are still read; the start rewrites them in this form.
const (
	logMagic   = "DLLOG2\n\x00"
	logMagicV1 = "DLLOG1\n\x00"
)

const logHeaderSize = int64(len(logMagic) + 8 + 4)

// readLogHeader returns the epoch of log b and the size of its header, or
// errBadLog when b does not start with a whole, undamaged header.
func readLogHeader(b []byte) (epoch uint64, size int, err error) {
	const v1Size = len(logMagicV1) + 8
	switch {
	case len(b) >= int(logHeaderSize) && string(b[:len(logMagic)]) == logMagic:
		size = int(logHeaderSize)
		if crc32.ChecksumIEEE(b[:size-4]) != binary.BigEndian.Uint32(b[size-4:]) {
			return 0, 0, errBadLog
		}
	case len(b) >= v1Size && string(b[:len(logMagicV1)]) == logMagicV1:
		size = v1Size
	default:
		return 0, 0, errBadLog
	}
	return binary.BigEndian.Uint64(b[len(logMagic):]), size, nil
}

var (
	errStaleLog = errors.New("log continues an older snapshot")
	// A log is written after its snapshot, the directory synced between:
	// one newer than its snapshot means the snapshot went missing or was
	// replaced by an older copy, and its entries are not in the log.
	errNewerLog = errors.New("log continues a newer snapshot than the one there")
)
var errBadLog = errors.New("log is corrupt")

// replayLog calls fn for each record of the log b, in order. It returns
// errStaleLog or errNewerLog, calling fn for none, when the log continues
// an older or a newer snapshot than that of epoch want, and errBadLog when a whole record is damaged
// (after calling fn for the records before it: the caller gives up). An
// unfinished last record, which a crash mid-write leaves, is reported as
// torn and not passed on.
func replayLog(b []byte, fn func(put bool, k Key, exp int64, val []byte), want uint64) (epoch uint64, torn bool, err error) {
	epoch, hdr, err := readLogHeader(b)
	switch {
	case err != nil:
		return 0, false, err
	case epoch < want:
		return epoch, false, errStaleLog
	case epoch > want:
		return epoch, false, errNewerLog
	}
	p := b[hdr:]
	for len(p) > 0 {
		l, n := binary.Uvarint(p)
		switch {
		case n < 0:
			return epoch, false, errBadLog
		case n == 0 || len(p)-n < 4 || l > uint64(len(p)-n-4): // compared so that no sum can wrap
			return epoch, true, nil // the last record was cut short
		case l < 1+uint64(len(Key{})):
			return epoch, false, errBadLog
		}
		payload := p[n : n+int(l)]
		if crc32.ChecksumIEEE(payload) != binary.BigEndian.Uint32(p[n+int(l):]) {
			if len(p) == n+int(l)+4 {
				return epoch, true, nil // the last record was cut short
			}
			return epoch, false, errBadLog
		}
		p = p[n+int(l)+4:]
		var k Key
		copy(k[:], payload[1:])
		switch rest := payload[1+len(k):]; payload[0] {
		case 'P':
			exp, m := binary.Varint(rest)
			if m <= 0 {
				return epoch, false, errBadLog
			}
			fn(true, k, exp, append([]byte(nil), rest[m:]...))
		case 'D':
			if len(rest) != 0 {
				return epoch, false, errBadLog
			}
			fn(false, k, 0, nil)
		default:
			return epoch, false, errBadLog
		}
	}
	return epoch, false, nil
}
