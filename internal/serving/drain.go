package serving

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// linger is how long Stop leaves a connection that waits for a request
// (idle between keep-alive requests, or new and silent) before it closes
// it, and then how long it reads what the client still sends before the
// last close. A client about to reuse the connection has this long to
// send its request and get its 503; one silent for as long is taken to
// have nothing to send.
const linger = time.Second

// conns tracks a server's open connections, accepted through its listener
// (Serve) and followed through its ConnState hook, so that Stop can wait
// for them and close each one only between requests.
type conns struct {
	linger time.Duration // linger, or a test's

	draining atomic.Bool // Stop has begun: waiting connections linger, then close

	mu      sync.Mutex // guards the fields below
	open    map[*conn]struct{}
	old     int           // of open, those open when drain was called
	changed chan struct{} // closed and replaced when one of open closes while draining
	ln      *listener     // the listener Serve serves; nil before
}

// listen returns ln as the server serves it: each connection it accepts
// tracked and wrapped in a conn.
func (c *conns) listen(ln net.Listener) *listener {
	l := &listener{Listener: ln, conns: c, accepting: make(chan struct{}), closed: make(chan struct{})}
	c.mu.Lock()
	c.ln = l
	c.mu.Unlock()
	return l
}

func (c *conns) add(nc net.Conn) *conn {
	cn := &conn{Conn: nc, set: c}
	c.mu.Lock()
	if c.open == nil {
		c.open = make(map[*conn]struct{})
	}
	c.open[cn] = struct{}{}
	c.mu.Unlock()
	if c.draining.Load() {
		cn.arm(c.linger)
	}
	return cn
}

// track is the server's ConnState hook. For a request's start and end
// (StateActive, StateIdle), which are on every request's path, it takes
// the connection's lock only.
func (c *conns) track(nc net.Conn, state http.ConnState) {
	cn, ok := nc.(*conn)
	if !ok { // not served through Serve
		return
	}
	switch state {
	case http.StateActive:
		cn.setBusy(true)
	case http.StateIdle:
		cn.setBusy(false)
		if c.draining.Load() {
			cn.arm(c.linger)
		}
	case http.StateHijacked:
		cn.setBusy(true) // the handler's now: Close closes it
		c.remove(cn)
	case http.StateClosed:
		c.remove(cn)
	}
}

func (c *conns) remove(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.open[cn]; !ok {
		return
	}
	delete(c.open, cn)
	if cn.old {
		c.old--
	}
	if c.changed != nil {
		close(c.changed)
		c.changed = make(chan struct{})
	}
}

// drain begins the stop: every connection open now is counted as old,
// and those waiting for a request close after their linger unless one
// comes. It is called once.
func (c *conns) drain() {
	c.draining.Store(true)
	c.mu.Lock()
	c.changed = make(chan struct{})
	waiting := make([]*conn, 0, len(c.open))
	for cn := range c.open {
		cn.old = true
		waiting = append(waiting, cn)
	}
	c.old = len(c.open)
	c.mu.Unlock()
	for _, cn := range waiting {
		cn.arm(c.linger)
	}
}

// wait returns when no connection of those drain counted as old (all,
// not just those, if all) is open, or false when done is closed first.
func (c *conns) wait(all bool, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		n, ch := c.old, c.changed
		if all {
			n = len(c.open)
		}
		c.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// stopAccepting stops the listener (listener.stop), after which
// connection attempts are refused, and returns a channel closed once no
// connection can be added any more.
func (c *conns) stopAccepting() <-chan struct{} {
	c.mu.Lock()
	l := c.ln
	c.mu.Unlock()
	if l == nil { // never served
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	l.stop()
	return l.accepting
}

// listener is the server's listener, wrapping each connection it accepts
// in a conn. Stop stops it before the server is shut down: Accept then
// waits for Close, so that Serve returns http.ErrServerClosed as after
// Shutdown alone.
type listener struct {
	net.Listener
	conns *conns

	stopped     atomic.Bool
	accepting   chan struct{} // closed once Accept has failed, or Serve returned
	doneAccept  sync.Once
	closed      chan struct{} // closed by Close
	closeCalled sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		return l.conns.add(nc), nil
	}
	if !l.stopped.Load() {
		return nil, err
	}
	l.Listener.Close() // the deadline stop set has passed
	l.served()
	<-l.closed
	return nil, net.ErrClosed
}

// served says that Accept adds no more connections.
func (l *listener) served() { l.doneAccept.Do(func() { close(l.accepting) }) }

// backlogDrain is how long the listener, its backlog cut to nothing,
// goes on accepting before it closes.
const backlogDrain = 20 * time.Millisecond

// stop stops accepting; Close then only ends Accept's wait. Closing the
// socket would reset each connection in its backlog, which the kernel
// accepted and the client may have sent a request on: so where it can,
// stop cuts the backlog to nothing first (new connection attempts are
// no longer answered, and are refused once the socket closes), accepts
// what is in it for a moment, and only then closes.
func (l *listener) stop() {
	l.stopped.Store(true)
	d, ok := l.Listener.(interface{ SetDeadline(time.Time) error })
	if ok && cutBacklog(l.Listener) && d.SetDeadline(time.Now().Add(backlogDrain)) == nil {
		return // Accept closes the socket when the deadline passes
	}
	l.Listener.Close()
}

func (l *listener) Close() error {
	l.closeCalled.Do(func() { close(l.closed) })
	err := l.Listener.Close()
	if l.stopped.Load() {
		return nil // closed by Accept already, or failing
	}
	return err
}

// conn is a connection the server serves. It knows whether the server
// has read any of a request since the connection last waited for one
// (busy), so that Stop can close it between requests only: never once the
// server has read what it would then not answer.
type conn struct {
	net.Conn
	set *conns
	old bool // open when the stop began; guarded by set.mu

	shut  atomic.Bool // the write side is closed: what the client still sends is read and dropped
	until time.Time   // until when it is read, written before shut is set

	mu     sync.Mutex // guards the fields below
	busy   bool       // the server has read bytes of a request it has not answered yet
	gen    uint64     // counts changes of busy: a linger armed before one is over
	closed bool
}

// Read reads for the server; once the connection is shut it reads only to
// drop, up to its client's close or its deadline, and then says EOF.
func (c *conn) Read(p []byte) (int, error) {
	if c.shut.Load() {
		return c.drop()
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	shut := c.shut.Load()
	if !shut && !c.busy {
		c.busy = true
		c.gen++
	}
	c.mu.Unlock()
	if shut { // shut while it waited: the server never sees these bytes
		return c.drop()
	}
	return n, err
}

// drop reads and drops what the client sends until it closes or the
// deadline shut set (net/http may have set another since) passes.
func (c *conn) drop() (int, error) {
	c.Conn.SetReadDeadline(c.until)
	io.Copy(io.Discard, c.Conn)
	return 0, io.EOF
}

// Close closes the connection; a linger armed before does nothing.
func (c *conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *conn) setBusy(b bool) {
	c.mu.Lock()
	c.busy = b
	c.gen++ // even idle to idle, after a pipelined request: a linger armed before is over
	c.mu.Unlock()
}

// arm shuts the connection after d if it waits for a request until then.
func (c *conn) arm(d time.Duration) {
	c.mu.Lock()
	gen, ok := c.gen, !c.busy && !c.closed && !c.shut.Load()
	c.mu.Unlock()
	if ok {
		time.AfterFunc(d, func() { c.shutIfWaiting(gen, d) })
	}
}

// shutIfWaiting closes the connection's write side (the client sees EOF,
// its request not read) if it has waited for a request since gen, and
// from then on drops what the client sends, for up to d, so that the
// last close finds nothing unread (which would send a reset instead).
func (c *conn) shutIfWaiting(gen uint64, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy || c.gen != gen || c.closed || c.shut.Load() {
		return
	}
	c.until = time.Now().Add(d)
	c.shut.Store(true)
	c.Conn.SetReadDeadline(c.until) // a read under way may have a later one
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// CloseWrite closes the write side, as net/http does after a response it
// sends with "Connection: close" when the request's body was left unread.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
