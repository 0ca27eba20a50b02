package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLogBufferKeepsLinesWholeAndInOrder writes from several goroutines
// through buffers far smaller than the lines' total, lines longer than a
// buffer among them, and checks that w gets every line whole, each
// goroutine's in the order it wrote them, in writes no longer than a
// buffer unless a single line is.
func TestLogBufferKeepsLinesWholeAndInOrder(t *testing.T) {
	tests := []struct {
		name       string
		size       int
		goroutines int
		lines      int
	}{
		{"one writer, lines fit", 256, 1, 500},
		{"racing writers, lines fit", 256, 8, 500},
		{"racing writers, some lines longer than a buffer", 40, 8, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w recordingWriter
			b := newLogBuffer(&w, tt.size)
			stop := make(chan struct{})
			flushed := make(chan struct{})
			go func() { // the ticker's Flush, racing the Writes
				defer close(flushed)
				for {
					select {
					case <-stop:
						return
					default:
						if err := b.Flush(); err != nil {
							t.Errorf("Flush: %v", err)
						}
					}
				}
			}()
			var wg sync.WaitGroup
			for g := range tt.goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tt.lines {
						pad := strings.Repeat("x", i%50) // some over 40 bytes with the rest
						if _, err := fmt.Fprintf(b, "g%d %d %s\n", g, i, pad); err != nil {
							t.Errorf("Write: %v", err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			<-flushed
			if err := b.Flush(); err != nil {
				t.Fatalf("Flush: %v", err)
			}

			next := make([]int, tt.goroutines) // the line expected next of each goroutine
			for _, line := range strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n") {
				f := strings.SplitN(line, " ", 3)
				if len(f) != 3 || !strings.HasPrefix(f[0], "g") {
					t.Fatalf("line %q; want whole lines", line)
				}
				g, err1 := strconv.Atoi(f[0][1:])
				i, err2 := strconv.Atoi(f[1])
				pad := f[2]
				if err1 != nil || err2 != nil {
					t.Fatalf("line %q; want whole lines", line)
				}
				if g < 0 || g >= tt.goroutines || i != next[g] {
					t.Fatalf("line %q; want g%d's line %d next", line, g, next[g])
				}
				if want := strings.Repeat("x", i%50); pad != want {
					t.Fatalf("line %q; want its padding %q", line, want)
				}
				next[g]++
			}
			for g, n := range next {
				if n != tt.lines {
					t.Errorf("goroutine %d: %d lines written out; want %d", g, n, tt.lines)
				}
			}
			for i, n := range w.sizes {
				if n > tt.size && n > len("g7 199 ")+49+1 {
					t.Errorf("a write of %d bytes; want at most the buffer's %d, or one line", n, tt.size)
				}
				if !w.endsLine[i] {
					t.Errorf("write %d of %d bytes ends mid-line; want whole lines in each write", i, n)
				}
			}
		})
	}
}

// TestLogBufferWriteDoesNotWaitForW checks that while a full buffer is
// being written, a line that fits in the other one is taken at once: a
// slow log must not stall every request logging its line.
func TestLogBufferWriteDoesNotWaitForW(t *testing.T) {
	w := &blockingWriter{entered: make(chan struct{}), release: make(chan struct{})}
	b := newLogBuffer(w, 16)
	if _, err := b.Write([]byte("0123456789\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	filled := make(chan error)
	go func() {
		_, err := b.Write([]byte("abcdefghij\n")) // does not fit: writes the first line out
		filled <- err
	}()
	<-w.entered // the first buffer is in w.Write, which waits for release

	took := make(chan error)
	go func() {
		_, err := b.Write([]byte("k\n"))
		took <- err
	}()
	select {
	case err := <-took:
		if err != nil {
			t.Errorf("Write while w is busy: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Write of a line that fits waited for w's write of the full buffer")
	}
	close(w.release)
	if err := <-filled; err != nil {
		t.Errorf("Write that filled the buffer: %v", err)
	}
	if err := b.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got, want := w.buf.String(), "0123456789\nabcdefghij\nk\n"; got != want {
		t.Errorf("written %q; want %q", got, want)
	}
}

// TestLogBufferReportsWriteErrors checks that a failed write to w is
// returned by the Write or Flush that made it, with the count io.Writer
// asks for, and that the lines after it still go out.
func TestLogBufferReportsWriteErrors(t *testing.T) {
	diskFull := errors.New("disk full")
	tests := []struct {
		name   string
		writes []string // the last one meets the failure
		wantN  int      // what that Write returns
		want   string   // in w after Flush, once it works again
	}{
		{"buffer fails, the line is kept", []string{"abcdef\n", "ghijkl\n"}, 7, "ghijkl\n"},
		{"buffer and a longer line both fail", []string{"abcdef\n", "0123456789\n"}, 0, ""},
		{"a longer line alone fails", []string{"0123456789\n"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &switchableWriter{}
			b := newLogBuffer(w, 8)
			last := len(tt.writes) - 1
			for _, l := range tt.writes[:last] {
				if _, err := b.Write([]byte(l)); err != nil {
					t.Fatalf("Write(%q) that fits = %v; want nil", l, err)
				}
			}
			w.err = diskFull
			n, err := b.Write([]byte(tt.writes[last]))
			if n != tt.wantN || !errors.Is(err, diskFull) {
				t.Errorf("Write(%q) meeting a failed write = %d, %v; want %d, %v", tt.writes[last], n, err, tt.wantN, diskFull)
			}
			w.err = nil
			if err := b.Flush(); err != nil {
				t.Errorf("Flush once w works = %v; want nil", err)
			}
			if got := w.buf.String(); got != tt.want {
				t.Errorf("written %q; want %q", got, tt.want)
			}
		})
	}

	w := &switchableWriter{err: diskFull}
	b := newLogBuffer(w, 8)
	if _, err := b.Write([]byte("mn\n")); err != nil {
		t.Fatalf("Write that fits = %v; want nil", err)
	}
	if err := b.Flush(); !errors.Is(err, diskFull) {
		t.Errorf("Flush of a failing w = %v; want %v", err, diskFull)
	}
}

// TestLogBufferAfterATornLine: a write that fails part way (the disk
// filled) leaves a line cut short; the next write then begins with a line
// break, so that the lines after it are whole lines, not glued to it.
func TestLogBufferAfterATornLine(t *testing.T) {
	for _, tt := range []struct {
		name string
		room int // bytes the failing write gets out
		want string
	}{
		{"cut mid-line", 12, "line one\nlin\nline three\n"},
		{"cut at a line's end", 9, "line one\nline three\n"},
		{"nothing written", 0, "line three\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &roomyWriter{room: tt.room}
			b := newLogBuffer(w, 64)
			b.Write([]byte("line one\n"))
			b.Write([]byte("line two\n"))
			if err := b.Flush(); err == nil {
				t.Fatalf("Flush with %d bytes of room = nil; want an error", tt.room)
			}
			w.room = -1 // room again
			b.Write([]byte("line three\n"))
			if err := b.Flush(); err != nil {
				t.Fatalf("Flush = %v; want nil", err)
			}
			if got := w.buf.String(); got != tt.want {
				t.Errorf("written %q; want %q", got, tt.want)
			}
		})
	}
}

// roomyWriter writes up to room bytes, then fails as a full disk does;
// with room -1 it writes everything.
type roomyWriter struct {
	room int
	buf  bytes.Buffer
}

func (w *roomyWriter) Write(p []byte) (int, error) {
	if w.room < 0 || len(p) <= w.room {
		if w.room >= 0 {
			w.room -= len(p)
		}
		return w.buf.Write(p)
	}
	n, _ := w.buf.Write(p[:w.room])
	w.room = 0
	return n, errors.New("no space left on device")
}

// recordingWriter keeps what is written, and the size of each write and
// whether it ended a line. Its Writes must not overlap.
type recordingWriter struct {
	bytes.Buffer
	sizes    []int
	endsLine []bool
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	w.endsLine = append(w.endsLine, bytes.HasSuffix(p, []byte("\n")))
	return w.Buffer.Write(p)
}

// blockingWriter's first Write signals entered, then waits for release.
type blockingWriter struct {
	entered, release chan struct{}
	once             sync.Once
	buf              bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
	return w.buf.Write(p)
}

// switchableWriter fails every write while err is set.
type switchableWriter struct {
	err error
	buf bytes.Buffer
}

func (w *switchableWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	return w.buf.Write(p)
}
