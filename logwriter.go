package main

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// logOut is where the service's JSON log lines go: standard error, through
// a buffer (logWriter). Whoever exits flushes it first.
var logOut = newLogWriter(os.Stderr, 64<<10, 100*time.Millisecond)

// newLogger is the service's logger, both builds': one JSON line a record,
// of level INFO and above, written to w.
func newLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// logWriter is an io.Writer safe for concurrent use that buffers what is
// written to w: a line a request is in the contract, and a write to
// standard error for each would cost a system call a request. The buffer
// goes out when it fills, at Flush, and at the latest delay after the
// first write into an empty buffer, so a line never waits longer than
// that. Each Write reaches w whole, unless it is longer than the buffer
// (slog's handlers write a line a call).
//
// A failed write to w loses what the buffer held and is reported to the
// Write or Flush that made it; the lines after it are written as usual.
type logWriter struct {
	w     io.Writer
	delay time.Duration
	timer *time.Timer // flushes delay after the first write into an empty buffer

	mu    sync.Mutex // guards the fields below
	buf   *bufio.Writer
	armed bool // timer is set to flush what buf holds
}

// newLogWriter returns a logWriter writing to w in writes of up to size
// bytes, none of them later than delay after its first line.
func newLogWriter(w io.Writer, size int, delay time.Duration) *logWriter {
	l := &logWriter{w: w, delay: delay, buf: bufio.NewWriterSize(w, size)}
	l.timer = time.AfterFunc(time.Hour, func() { l.Flush() })
	l.timer.Stop()
	return l
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var flushErr error
	if len(p) > l.buf.Available() && l.buf.Buffered() > 0 {
		// What is buffered goes first, so that p is not split between
		// two writes (bufio would fill the buffer up with its start).
		flushErr = l.flushLocked()
	}
	n, err := l.buf.Write(p)
	if err != nil {
		l.buf.Reset(l.w) // a bufio.Writer keeps failing after a failure
		return n, err
	}
	if l.buf.Buffered() > 0 && !l.armed {
		l.armed = true
		l.timer.Reset(l.delay)
	}
	return n, flushErr // p is kept or written, whatever became of the lines before it
}

// Flush writes out what is buffered.
func (l *logWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false // a timer still set finds the buffer empty, or flushes a later line early
	return l.flushLocked()
}

// flushLocked writes out what is buffered; after a failure the buffer is
// emptied, its lines lost. l.mu must be held.
func (l *logWriter) flushLocked() error {
	err := l.buf.Flush()
	if err != nil {
		l.buf.Reset(l.w)
	}
	return err
}
