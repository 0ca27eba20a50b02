package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// writes records each write to it, whole, and signals each on written.
type writes struct {
	mu      sync.Mutex // guards the fields below
	got     [][]byte
	fail    int // writes still to fail
	written chan struct{}
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail > 0 {
		w.fail--
		return 0, errors.New("disk full")
	}
	w.got = append(w.got, bytes.Clone(p))
	if w.written != nil {
		select {
		case w.written <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (w *writes) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.Join(w.got, nil))
}

// TestLogWriterLinesWholeAndInOrder writes lines from many goroutines
// through a small buffer: every line arrives once, whole, each
// goroutine's in order, and every write to w ends at a line's end.
func TestLogWriterLinesWholeAndInOrder(t *testing.T) {
	const writers, lines = 8, 500
	var w writes
	l := newLogWriter(&w, 256, time.Hour)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(l, "{\"g\":%d,\"i\":%d,\"pad\":%q}\n", g, i, strings.Repeat("x", i%50))
			}
		})
	}
	wg.Wait()
	if err := l.Flush(); err != nil {
		t.Fatalf("Flush() = %v; want nil", err)
	}
	for _, p := range w.got {
		if p[len(p)-1] != '\n' {
			t.Fatalf("a write to w ends mid-line: %q", p)
		}
	}
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(w.all(), "\n"), "\n")
	for _, line := range got {
		var g, i int
		if _, err := fmt.Sscanf(line, `{"g":%d,"i":%d,`, &g, &i); err != nil || g < 0 || g >= writers {
			t.Fatalf("line %q: not one written", line)
		}
		if want := fmt.Sprintf("{\"g\":%d,\"i\":%d,\"pad\":%q}", g, i, strings.Repeat("x", i%50)); line != want {
			t.Fatalf("line %q; want %q", line, want)
		}
		if i != next[g] {
			t.Fatalf("writer %d's line %d after its line %d", g, i, next[g]-1)
		}
		next[g]++
	}
	if len(got) != writers*lines {
		t.Errorf("%d lines; want %d", len(got), writers*lines)
	}
}

// TestLogWriterBuffers: a line is not written at once, but at Flush; or,
// without one, by the timer, delay after it was written.
func TestLogWriterBuffers(t *testing.T) {
	var w writes
	l := newLogWriter(&w, 4096, time.Hour)
	l.Write([]byte("a\n"))
	if got := w.all(); got != "" {
		t.Errorf("written before a Flush: %q; want nothing", got)
	}
	l.Flush()
	if got := w.all(); got != "a\n" {
		t.Errorf("written after Flush: %q; want %q", got, "a\n")
	}

	timed := writes{written: make(chan struct{}, 1)}
	l = newLogWriter(&timed, 4096, time.Millisecond)
	for _, line := range []string{"b\n", "c\n"} { // the second after the timer has emptied the buffer
		l.Write([]byte(line))
		select {
		case <-timed.written:
		case <-time.After(time.Minute):
			t.Fatalf("%q not written a minute after, without a Flush; want it written after 1ms", line)
		}
	}
	if got := timed.all(); got != "b\nc\n" {
		t.Errorf("written by the timer: %q; want %q", got, "b\nc\n")
	}
}

// TestLogWriterAfterAFailedWrite: a failed write loses what the buffer
// held and is reported; the lines after it are written as usual.
func TestLogWriterAfterAFailedWrite(t *testing.T) {
	w := writes{fail: 1}
	l := newLogWriter(&w, 4096, time.Hour)
	l.Write([]byte("lost\n"))
	if err := l.Flush(); err == nil {
		t.Errorf("Flush() with w failing = nil; want its error")
	}
	l.Write([]byte("kept\n"))
	if err := l.Flush(); err != nil {
		t.Errorf("Flush() after the failure = %v; want nil", err)
	}
	if got := w.all(); got != "kept\n" {
		t.Errorf("written: %q; want %q", got, "kept\n")
	}
}
