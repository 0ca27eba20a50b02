package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coarsePair returns a coarseListener without a reaper (tests call
// expire), a server side connection accepted from it and the client side.
func coarsePair(t *testing.T) (*coarseListener, *coarseConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newCoarseListener(ln, 0)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	sc, err := l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { sc.Close() })
	return l, sc.(*coarseConn), client
}

// readByte reads one byte from c and returns it, or the error.
func readByte(c net.Conn) (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(c, b[:])
	return b[0], err
}

// assertReads checks that a byte the client sends reaches sc.
func assertReads(t *testing.T, client, sc net.Conn, what string) {
	t.Helper()
	client.Write([]byte("r"))
	b, err := readByte(sc)
	assert.NoError(t, err, what)
	assert.Equal(t, byte('r'), b, what)
}

func TestCoarseDeadlineFiresOnlyOncePassed(t *testing.T) {
	for _, dir := range []string{"read", "write"} {
		t.Run(dir, func(t *testing.T) {
			l, sc, client := coarsePair(t)
			set, use := sc.SetReadDeadline, func() error {
				client.Write([]byte("x"))
				_, err := readByte(sc)
				return err
			}
			if dir == "write" {
				set, use = sc.SetWriteDeadline, func() error {
					_, err := sc.Write([]byte("x"))
					return err
				}
			}
			at := time.Now().Add(time.Minute)
			require.NoError(t, set(at))
			l.expire(at.Add(-time.Second))
			assert.NoError(t, use(), "%s before the deadline", dir)
			l.expire(at.Add(time.Second))
			err := use()
			assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%s after the deadline = %v; want os.ErrDeadlineExceeded", dir, err)
			require.NoError(t, set(time.Time{}))
			assert.NoError(t, use(), "%s once the deadline is cleared", dir)
		})
	}
}

func TestCoarseDeadlineReplaced(t *testing.T) {
	tests := []struct {
		name string
		then time.Duration // the second deadline, after now; 0 clears
	}{
		{"cleared", 0},
		{"moved later", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, sc, client := coarsePair(t)
			first := time.Now().Add(time.Minute)
			require.NoError(t, sc.SetReadDeadline(first))
			var then time.Time
			if tt.then != 0 {
				then = time.Now().Add(tt.then)
			}
			require.NoError(t, sc.SetReadDeadline(then))
			l.expire(first.Add(time.Second))
			assertReads(t, client, sc, "read after the first deadline, which was replaced")
		})
	}
}

// A deadline already passed interrupts a blocked read at once, with no
// reaper to apply it: net/http relies on that to stop its background read
// after every request.
func TestCoarseDeadlinePassedAppliesAtOnce(t *testing.T) {
	_, sc, client := coarsePair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := readByte(sc)
		errc <- err
	}()
	require.NoError(t, sc.SetReadDeadline(time.Unix(1, 0)))
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second): // a bound on failure, not a wait for success
		t.Fatal("a passed deadline left the read blocked")
	}
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "blocked read = %v; want os.ErrDeadlineExceeded", err)

	require.NoError(t, sc.SetReadDeadline(time.Time{}))
	assertReads(t, client, sc, "read once the passed deadline is cleared")
}

// A deadline set just after the reaper's tick, and passed already, applies
// at once, as time.Now() does when used to interrupt a read.
func TestCoarseDeadlineJustPassed(t *testing.T) {
	l, sc, _ := coarsePair(t)
	l.tick = time.Hour // as if the reaper were due within the hour
	errc := make(chan error, 1)
	go func() {
		_, err := readByte(sc)
		errc <- err
	}()
	require.NoError(t, sc.SetReadDeadline(time.Now()))
	select {
	case err := <-errc:
		assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "read after SetReadDeadline(time.Now()) = %v; want os.ErrDeadlineExceeded", err)
	case <-time.After(10 * time.Second): // a bound on failure, not a wait for success
		t.Fatal("SetReadDeadline(time.Now()) left the read blocked")
	}
}

// ReadFrom, which io.Copy into a connection and net/http's sendfile use,
// writes through the socket.
func TestCoarseConnReadFrom(t *testing.T) {
	_, sc, client := coarsePair(t)
	n, err := sc.ReadFrom(strings.NewReader("abc"))
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	got := make([]byte, 3)
	_, err = io.ReadFull(client, got)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(got))
}

func TestCoarseListenerForgetsClosedConns(t *testing.T) {
	l, sc, _ := coarsePair(t)
	now := time.Now()
	assert.True(t, l.expire(now), "expire on an open listener")
	require.NoError(t, l.Close())
	assert.True(t, l.expire(now), "expire with a connection still open")
	require.NoError(t, sc.Close())
	l.mu.Lock()
	n := len(l.conns)
	l.mu.Unlock()
	assert.Equal(t, 0, n, "connections remembered after Close")
	assert.False(t, l.expire(now), "expire with the listener and its connections closed")
}

// serveCoarse serves h with the given server settings on a coarseListener
// with the given tick, and returns its address.
func serveCoarse(t *testing.T, srv *http.Server, tick time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(newCoarseListener(ln, tick))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// Through net/http with every timeout set and no reaper at all. After each
// response net/http interrupts its background read with a passed deadline
// and waits for it: kept lazily, the connection would never turn idle,
// and Shutdown, which waits for that, would time out.
func TestCoarseListenerServesKeepAlive(t *testing.T) {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%d", len(b))
		}),
		ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute, IdleTimeout: time.Minute,
	}
	addr := serveCoarse(t, srv, 0)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a stuck server fails the test, not hangs it
	br := bufio.NewReader(c)
	for i := range 50 {
		body := strings.Repeat("x", i)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		res, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "request %d", i)
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, fmt.Sprint(i), string(got), "request %d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.NoError(t, srv.Shutdown(ctx), "Shutdown with a keep-alive connection between requests")
}

// A client that never finishes its headers loses the connection once
// ReadHeaderTimeout has passed, and not before.
func TestCoarseListenerEnforcesTimeouts(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: timeout}
	addr := serveCoarse(t, srv, 10*time.Millisecond)
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a server that never closes fails the test, not hangs it
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	_, err = io.ReadAll(c)                          // until the server closes (an EOF or a reset)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the server never closed the connection")
	assert.GreaterOrEqual(t, time.Since(start), timeout, "closed before ReadHeaderTimeout")
}

// Deadlines set while the reaper applies others (run with -race) leave the
// connection usable once they are cleared.
func TestCoarseDeadlineRace(t *testing.T) {
	l, sc, client := coarsePair(t)
	var wg sync.WaitGroup
	for _, set := range []func(time.Time) error{sc.SetReadDeadline, sc.SetWriteDeadline, sc.SetDeadline} {
		wg.Go(func() {
			for i := range 200 {
				set(time.Now().Add(time.Duration(i%3) * time.Millisecond))
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			l.expire(time.Now())
		}
	})
	wg.Wait()
	require.NoError(t, sc.SetDeadline(time.Time{}))
	l.expire(time.Now().Add(time.Hour))
	assertReads(t, client, sc, "read once every deadline is cleared")
	_, err := sc.Write([]byte("w"))
	assert.NoError(t, err, "write once every deadline is cleared")
}
