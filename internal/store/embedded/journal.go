package embedded

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/store"
)

// journal appends records to the current journal file, one batch at a
// time: a change appends its record to the open batch, the writer takes
// the whole batch, writes it with one write and one fsync, then tells
// every change of it at once (group commit). The writer starts a batch's
// write as soon as someone waits for it, or a Deferred will (durability
// "fsync"), or once it holds batchFull bytes, and every writeEvery
// otherwise: the records nobody waits for (interval mode's,
// NoWait's) ride with the next batch somebody does, rather than cost an
// fsync of their own.
type journal struct {
	db       *DB
	dir      string
	interval bool  // durability "interval": nobody waits for a batch
	foldAt   int64 // see Options.FoldAt

	mu      sync.Mutex // guards cur, writing, spare and shut
	cur     *batch     // the open batch
	writing *batch     // the batch being written, until it is told
	spare   []byte     // the buffer of the batch written last, for the next
	shut    bool       // closed: appends get a failed ticket

	kick chan struct{} // someone waits for a batch (fsync mode); buffered, one
	done chan struct{} // closed when the writer has ended

	// Owned by the writer goroutine.
	f        file         // the current journal file
	gen      uint64       // its generation
	size     int64        // its bytes
	alloc    int64        // its size on disk: size, then zeros
	replayed int64        // bytes of the journals before it that the next start reads too
	snapSize atomic.Int64 // bytes of the last snapshot
	folding  atomic.Bool  // a snapshot is being written in the background
	folds    sync.WaitGroup

	failed atomic.Pointer[error] // the write that failed; nil while writes work
	final  bool                  // close has written its snapshot
}

// file is what the journal needs of its file: an *os.File, or in tests
// one whose writes fail.
type file interface {
	Write([]byte) (int, error)
	WriteAt([]byte, int64) (int, error)
	Sync() error
	Close() error
}

// batch is records written together, and the outcome of their write.
type batch struct {
	buf  []byte        // batchHeaderSize bytes for the header, then the records
	done chan struct{} // closed once written (err nil) or failed
	err  error         // set before done is closed
}

// ticket is a change's place in the journal: the batch its record is in.
type ticket struct{ b *batch }

// newBatch is an open batch, with buf (empty, or nil) for its buffer.
func newBatch(buf []byte) *batch {
	return &batch{buf: append(buf, make([]byte, batchHeaderSize)...), done: make(chan struct{})}
}

// retryEvery is how often a failing journal tries to recover.
const retryEvery = time.Second

// writeEvery is how often the journal is written when nobody waits for
// it: well within the second that durability "interval" and NoWait
// promise.
const writeEvery = 200 * time.Millisecond

// closedBatch is the batch of a change made as the journal closed: it
// is never written, and its change is not acknowledged.
var closedBatch = func() *batch {
	b := &batch{done: make(chan struct{}), err: fmt.Errorf("%w: closed", store.ErrUnavailable)}
	close(b.done)
	return b
}()

func (j *journal) append(r record) ticket {
	j.mu.Lock()
	if j.shut {
		j.mu.Unlock()
		return ticket{closedBatch}
	}
	b := j.cur
	b.buf = appendRecord(b.buf, r)
	full := len(b.buf) >= batchFull
	j.mu.Unlock()
	if full {
		j.ask(ticket{b})
	}
	return ticket{b}
}

// barrier returns a ticket told once every record appended so far is on
// disk or failed: the open batch's, or else the batch being written's.
func (j *journal) barrier() ticket {
	j.mu.Lock()
	var b *batch
	switch {
	case j.shut:
	case len(j.cur.buf) > batchHeaderSize:
		b = j.cur
	default:
		b = j.writing
	}
	j.mu.Unlock()
	return ticket{b}
}

// ask has the writer write t's batch now, unless it is written already:
// someone waits for it.
func (j *journal) ask(t ticket) {
	select {
	case <-t.b.done:
		return
	default:
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

func (j *journal) wait(ctx context.Context, t ticket) error {
	if t.b == nil || j.interval {
		return nil
	}
	j.ask(t)
	select {
	case <-t.b.done:
		return t.b.err
	case <-ctx.Done():
		// The change may still be written; it is not acknowledged.
		return fmt.Errorf("%w: %v", store.ErrUnavailable, ctx.Err())
	}
}

func (j *journal) failing() error {
	if p := j.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (j *journal) fail(err error) {
	err = fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	if j.failed.Swap(&err) == nil {
		j.db.log.Error("store: writing the journal failed; changes answer 503 until it works again", "err", err)
	}
}

// writer writes the batches until close, and recovers from failures.
func (j *journal) writer() {
	defer close(j.done)
	tick := time.NewTicker(writeEvery)
	defer tick.Stop()
	retry := time.NewTicker(retryEvery)
	defer retry.Stop()
	for {
		select {
		case <-j.db.stop:
			j.flush()
			return
		case <-j.kick:
			// The changes made together by one caller (a request's
			// records, written from goroutines of their own) are
			// appended within microseconds: let them in first.
			runtime.Gosched()
			j.flush()
			j.maybeFold()
		case <-tick.C:
			j.flush()
			j.maybeFold()
		case <-retry.C:
			if j.failing() != nil {
				j.recover()
			}
		}
	}
}

// flush writes the open batch and fsyncs it.
func (j *journal) flush() {
	j.mu.Lock()
	b := j.cur
	if len(b.buf) == batchHeaderSize {
		j.mu.Unlock()
		return
	}
	j.cur = newBatch(j.spare)
	j.spare = nil
	j.writing = b
	j.mu.Unlock()

	b.err = j.failing()
	if b.err == nil {
		putBatchHeader(b.buf, j.size)
		b.err = j.write(b.buf)
		if b.err != nil {
			j.fail(b.err)
			b.err = j.failing()
		}
	}
	close(b.done)
	j.mu.Lock()
	j.writing = nil
	if cap(b.buf) <= maxSpare {
		j.spare = b.buf[:0] // the waiters of b read only done and err
	}
	j.mu.Unlock()
}

// maybeFold folds the journal once it has grown past foldAt and past
// twice the last snapshot, so that a start never reads much more than
// the state itself.
func (j *journal) maybeFold() {
	if j.failing() == nil && !j.folding.Load() && j.size > j.foldAt && j.size > 2*j.snapSize.Load() {
		j.fold()
	}
}

// maxSpare is the largest batch buffer kept for the next batch: a burst
// does not keep its memory.
const maxSpare = 1 << 20

// batchFull is the size at which a batch is written whether or not
// anyone waits for it: so that the changes nobody waits for, which may
// come at megabytes a writeEvery, make batches whose buffers are kept
// (maxSpare) rather than grown anew for each.
const batchFull = maxSpare / 2

// preallocStep is how far ahead of the records the journal file is
// filled with zeros, so that a write's fsync need not also write the
// file's new size (fdatasync): about half the time of an fsync here.
const preallocStep = 1 << 20

// zeros is what the journal is filled with ahead, a step at a time. Never
// written to.
var zeros [preallocStep]byte

func (j *journal) write(p []byte) error {
	if end := j.size + int64(len(p)); end > j.alloc {
		for j.alloc < end {
			if _, err := j.f.WriteAt(zeros[:], j.alloc); err != nil {
				return err
			}
			j.alloc += preallocStep
		}
		if err := j.f.Sync(); err != nil { // the size, once
			return err
		}
	}
	if _, err := j.f.WriteAt(p, j.size); err != nil {
		return err
	}
	j.size += int64(len(p))
	return syncData(j.f)
}

// fold starts a new journal file and writes a snapshot of memory in the
// background; once the snapshot is on disk, the files before it go.
// Every change in the old journal is in memory before the switch, so the
// snapshot holds it; changes made while it is written may be in both the
// snapshot and the new journal, which is harmless, as records state
// results.
func (j *journal) fold() {
	gen := j.gen + 1
	f, err := createFile(j.dir, journalName(gen), journalMagic, gen)
	if err != nil {
		j.db.log.Error("store: starting a new journal failed; the current one grows until it works", "err", err)
		return
	}
	j.f.Close()
	j.f, j.gen, j.size, j.alloc, j.replayed = f, gen, headerSize, headerSize, 0 // the snapshot under way covers the old journal
	j.folding.Store(true)
	j.folds.Add(1)
	go func() {
		defer j.folds.Done()
		defer j.folding.Store(false)
		n, err := writeSnapshot(j.db, j.dir, gen)
		if err != nil {
			j.db.log.Error("store: writing a snapshot failed; the journal is kept whole", "err", err)
			return
		}
		j.snapSize.Store(n)
		removeBefore(j.dir, gen, j.db.log)
	}()
}

// recover ends a failure: it writes a snapshot of memory, which holds
// every change made, acknowledged or not, and starts a new journal after
// it, so that nothing is appended to a file whose last write failed.
func (j *journal) recover() {
	if j.folding.Load() {
		return
	}
	gen := j.gen + 1
	n, err := writeSnapshot(j.db, j.dir, gen)
	if err != nil {
		return
	}
	f, err := createFile(j.dir, journalName(gen), journalMagic, gen)
	if err != nil {
		return
	}
	j.f.Close()
	j.f, j.gen, j.size, j.alloc, j.replayed = f, gen, headerSize, headerSize, 0
	j.snapSize.Store(n)
	removeBefore(j.dir, gen, j.db.log)
	j.failed.Store(nil)
	j.db.log.Info("store: writing the journal works again")
}

// closeFoldAt is the journal bytes a start would replay past which close
// folds them into a snapshot, so that the next start reads less; below
// it, the start replays them, which costs less than writing a snapshot
// now (the edge build's stop runs under a call deadline).
const closeFoldAt = 4 << 20

// close writes what is pending, and a snapshot of memory when the journal
// is large or failing (memory then holds changes the journal may not).
// It runs after db.stop is closed; when it fails it can be called again,
// and until it succeeds the journal is what the next start replays.
func (j *journal) close() error {
	<-j.done
	j.folds.Wait() // a fold under way: its snapshot is the base of ours
	j.mu.Lock()
	j.shut = true
	j.mu.Unlock()
	if j.final {
		return nil
	}
	j.flush() // what was appended after the writer's last flush
	if j.failing() == nil && j.replayed+j.size <= closeFoldAt {
		j.final = true
		return j.f.Close()
	}
	gen := j.gen + 1
	if _, err := writeSnapshot(j.db, j.dir, gen); err != nil {
		return err
	}
	j.f.Close()
	removeBefore(j.dir, gen, j.db.log)
	j.final = true
	return nil
}
