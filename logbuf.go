package main

import (
	"io"
	"os"
	"sync"
)

// logOut is where the service's JSON log lines go: standard error through
// a buffer. The timed work flushes it every second, and shutdown at the
// end; in between, the request whose line does not fit writes the full
// buffer out, about one request in 260, without holding up the others.
var logOut = newLogBuffer(os.Stderr, logBufSize)

// logBufSize is the size of each of logBuffer's two buffers.
const logBufSize = 64 << 10

// logBuffer is an io.Writer safe for concurrent use that collects writes
// in memory and hands them to w, in the order they came, in one write a
// buffer: when the buffer fills, and at Flush. Each Write's bytes reach w
// in one write, never split between two.
//
// It has two buffers so that writing to w never holds the lock every
// Write takes. With one (a bufio.Writer under a mutex), each request
// logging its line waited while a full buffer went to the file: 64 KiB
// into the page cache is tens to hundreds of microseconds on a VM, every
// 260 requests, and the service's goroutines queued up behind it, for
// 3.3 s of waiting in 8 s under wrk, with the cores partly idle.
//
// A failed write to w loses what it held, and is reported to the Write or
// Flush that made it; the lines after it are written as usual.
type logBuffer struct {
	w io.Writer
	// file is w when that is a regular file: Flush then also lets go of
	// the file's cached pages (dropPageCache). The service never reads
	// its log back, and at one line a request the cache would otherwise
	// grow by about 250 bytes a request.
	file *os.File

	mu  sync.Mutex // guards the fields below
	buf []byte     // what was written and not yet handed to w

	// out is held while a buffer is written to w. It is taken while
	// holding mu, so that buffers reach w in the order they filled; a
	// Write that fills the second buffer while the first is still being
	// written waits for it, holding mu, and so does Flush.
	out   sync.Mutex // guards the fields below
	spare []byte     // the other buffer, empty
	torn  bool       // a failed write ended w mid-line: the next begins with a line break
}

// newLogBuffer returns a logBuffer writing to w in writes of up to size
// bytes (a single longer Write goes to w whole).
func newLogBuffer(w io.Writer, size int) *logBuffer {
	b := &logBuffer{w: w, buf: make([]byte, 0, size), spare: make([]byte, 0, size)}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			b.file = f
		}
	}
	return b
}

// Write keeps p to be written to w later. When p does not fit in what is
// left of the buffer, the buffer is written out first; a failure of that
// write is returned with len(p), as p itself is kept. A p longer than a
// buffer is written out whole, after the buffer; if that fails, Write
// returns 0 and its error.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	if len(b.buf)+len(p) <= cap(b.buf) {
		b.buf = append(b.buf, p...)
		b.mu.Unlock()
		return len(p), nil
	}
	b.out.Lock()
	full := b.swapLocked()
	whole := len(p) > cap(b.buf) // too long for a buffer: written on its own, after full
	if !whole {
		b.buf = append(b.buf, p...)
	}
	b.mu.Unlock()
	defer b.out.Unlock()
	err := b.writeOutLocked(full)
	if whole {
		if werr := b.writeLocked(p); werr != nil {
			return 0, werr
		}
	}
	return len(p), err // p is kept or written, whatever became of the buffer before it
}

// Flush writes what is buffered. For a log in a regular file, it also
// starts writing the file's dirty pages to disk and drops those already
// written, the previous Flush's lines among them. That advice is given
// after both locks are released: it may wait on the disk.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	b.out.Lock()
	full := b.swapLocked()
	b.mu.Unlock()
	err := b.writeOutLocked(full)
	b.out.Unlock()
	return err
}

// swapLocked takes the buffer, to be written, and puts the spare one in
// its place. b.mu and b.out must be held.
func (b *logBuffer) swapLocked() (full []byte) {
	full, b.buf, b.spare = b.buf, b.spare, nil
	return full
}

// writeOutLocked writes full to w and keeps it as the spare buffer. b.out
// must be held.
func (b *logBuffer) writeOutLocked(full []byte) error {
	var err error
	if len(full) > 0 {
		err = b.writeLocked(full)
	}
	b.spare = full[:0]
	return err
}

// writeLocked writes p, whole lines, to w. A write that fails part way (a
// full disk) leaves w mid-line; the next write then begins with a line
// break, so that the lines after the cut one are whole lines again. b.out
// must be held.
func (b *logBuffer) writeLocked(p []byte) error {
	if b.torn {
		if _, err := b.w.Write([]byte{'\n'}); err != nil {
			return err
		}
		b.torn = false
	}
	n, err := b.w.Write(p)
	if err != nil && n > 0 && p[n-1] != '\n' {
		b.torn = true
	}
	return err
}
