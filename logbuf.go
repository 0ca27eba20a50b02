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
	mu sync.Mutex // guards w
	w  *bufio.Writer
	// file is w's destination when that is a regular file: Flush then
	// also lets go of the file's cached pages (dropPageCache). The
	// service never reads its log back, and at one line a request the
	// cache would otherwise grow by about 250 bytes a request.
	file *os.File
}

func newLogBuffer(w io.Writer) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(w, 64<<10)}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			b.file = f
		}
	}
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes what is buffered. For a log in a regular file, it also
// starts writing the file's dirty pages to disk and drops those already
// written, the previous Flush's lines among them. That advice is given
// after b.mu is released: it may wait on the disk, and every request
// needs b.mu to log its line.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	err := b.w.Flush()
	b.mu.Unlock()
	if b.file != nil { // set once, by newLogBuffer
		dropPageCache(b.file) // only advice: see its comment
	}
	return err
}
