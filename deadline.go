package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// coarseListener hands out connections whose read and write deadlines are
// kept coarsely. Setting a deadline only records it; one reaper goroutine
// per listener applies, every tick, the deadlines that have passed, and the
// blocked read or write then fails with os.ErrDeadlineExceeded as usual.
//
// The server's timeouts make net/http set five deadlines a request, and
// each one on the socket re-arms a runtime timer: 2 µs of CPU a request
// under load (about a tenth of it), for timeouts of seconds that need no
// millisecond precision. A deadline already passed when it is set goes to
// the socket at once: net/http sets one to interrupt a pending read, and
// waits for that read to return. Any other deadline fires up to one tick
// late.
type coarseListener struct {
	net.Listener
	base time.Time     // deadlines are kept as durations since base (monotonic, for deadlines made from time.Now as net/http's are)
	tick time.Duration // the reaper's period; 0 when there is no reaper
	now  atomic.Int64  // the reaper's clock: nanoseconds since base at its last tick

	mu     sync.Mutex // guards the fields below
	conns  map[*coarseConn]struct{}
	closed bool // by Close: the reaper stops once the last connection is gone
}

// deadlineTick is how late a deadline may fire.
const deadlineTick = 250 * time.Millisecond

// newCoarseListener wraps ln. With tick > 0 a reaper applies passed
// deadlines every tick, until the listener is closed and its last
// connection too (http.Server.Shutdown closes the listener first); with 0
// there is none, and expire must be called (tests do, with the times they
// choose).
func newCoarseListener(ln net.Listener, tick time.Duration) *coarseListener {
	l := &coarseListener{Listener: ln, base: time.Now(), tick: tick, conns: make(map[*coarseConn]struct{})}
	if tick > 0 {
		go l.reap(tick)
	}
	return l
}

func (l *coarseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &coarseConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[cc] = struct{}{}
	l.mu.Unlock()
	return cc, nil
}

// Close closes the listener. The connections it accepted keep their
// deadlines, and the reaper runs on until the last of them is closed.
func (l *coarseListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

func (l *coarseListener) reap(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for now := range t.C {
		if !l.expire(now) {
			return
		}
	}
}

// expire applies to their sockets the deadlines that have passed at now.
// It reports whether the listener may still have deadlines to apply: it
// is open or has open connections.
func (l *coarseListener) expire(now time.Time) bool {
	n := int64(now.Sub(l.base))
	l.now.Store(n)
	l.mu.Lock()
	conns := make([]*coarseConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	more := !l.closed || len(conns) > 0
	l.mu.Unlock()
	// Outside l.mu: a connection's lock is never taken under it, so that
	// Accept and Close never wait for a socket call of the reaper.
	for _, c := range conns {
		c.expire(n)
	}
	return more
}

// coarseConn is a connection of a coarseListener.
type coarseConn struct {
	net.Conn
	l *coarseListener

	mu    sync.Mutex // guards the fields below
	read  deadline
	write deadline
}

// deadline is one direction's deadline of a coarseConn.
type deadline struct {
	at     int64 // pending: nanoseconds since the listener's base, 0 for none
	socket bool  // the socket holds a deadline (a passed one), to clear on the next set
}

func (c *coarseConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *coarseConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(&c.read, t, c.Conn.SetReadDeadline)
}

func (c *coarseConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(&c.write, t, c.Conn.SetWriteDeadline)
}

// setLocked sets d to t. It calls the socket's set only when t has already
// passed, or to clear a passed deadline the socket holds. c.mu must be held.
func (c *coarseConn) setLocked(d *deadline, t time.Time, socket func(time.Time) error) error {
	d.at = 0
	if !t.IsZero() {
		// Passed at the reaper's last tick, or since: the clock is read
		// only for a deadline less than a tick after that.
		at, now := int64(t.Sub(c.l.base)), c.l.now.Load()
		if at <= now || at <= now+int64(c.l.tick) && time.Until(t) <= 0 {
			d.socket = true
			return socket(t)
		}
		d.at = at
	}
	if d.socket {
		d.socket = false
		return socket(time.Time{})
	}
	return nil
}

// longAgo is the deadline a socket gets once its own has passed.
var longAgo = time.Unix(1, 0)

// expire applies the deadlines passed at now (nanoseconds since base).
func (c *coarseConn) expire(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read.due(now) {
		c.Conn.SetReadDeadline(longAgo)
	}
	if c.write.due(now) {
		c.Conn.SetWriteDeadline(longAgo)
	}
}

// due reports whether d has passed at now; if so, the socket is to hold it.
func (d *deadline) due(now int64) bool {
	if d.at == 0 || d.at > now {
		return false
	}
	d.at, d.socket = 0, true
	return true
}

// Close closes the connection and forgets it.
func (c *coarseConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// ReadFrom lets io.Copy into the connection use the socket's own, which
// can send a file without copying it through user space.
func (c *coarseConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// CloseWrite shuts down the writing side when the socket can: net/http
// does so before closing a connection on an error, so that the client
// reads the error response rather than a reset.
func (c *coarseConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
