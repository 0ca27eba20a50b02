package main

import (
	"bufio"
	"io"
	"os"
	"sync"
)

// logOut is where the service's JSON log lines go: standard error through
// a buffer, so a request costs no write system call of its own. The timed
// work flushes it every second, and shutdown at the end; a full buffer
// flushes itself.
var logOut = newLogBuffer(os.Stderr)

// logBuffer is an io.Writer safe for concurrent use that buffers writes
// to w until Flush.
type logBuffer struct {
	mu sync.Mutex // guards the field below
	w  *bufio.Writer
}

func newLogBuffer(w io.Writer) *logBuffer { return &logBuffer{w: bufio.NewWriterSize(w, 64<<10)} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}
