package serving

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingListener remembers, of each connection it accepts, how many
// bytes the server has read, so that a client whose request got no answer
// can tell whether the server had read any of it.
type countingListener struct {
	net.Listener
	seq *atomic.Uint64 // shared with the clients: orders their dials and the accepts

	mu    sync.Mutex
	conns map[string]*countedConn // by the client's address
}

type countedConn struct {
	net.Conn
	accepted uint64 // seq when accepted
	read     atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countedConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

// SyscallConn and SetDeadline let Stop cut the backlog as it does a
// *net.TCPListener's.
func (l *countingListener) SyscallConn() (syscall.RawConn, error) {
	return l.Listener.(*net.TCPListener).SyscallConn()
}

func (l *countingListener) SetDeadline(t time.Time) error {
	return l.Listener.(*net.TCPListener).SetDeadline(t)
}

func (l *countingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: nc, accepted: l.seq.Add(1)}
	l.mu.Lock()
	l.conns[nc.RemoteAddr().String()] = cc
	l.mu.Unlock()
	return cc, nil
}

// read is how many bytes the server has read of the connection from
// client address addr dialled at seq dialed, and whether it accepted that
// connection at all (an earlier one from the same port does not count).
func (l *countingListener) read(addr string, dialed uint64) (n int64, accepted bool) {
	l.mu.Lock()
	cc := l.conns[addr]
	l.mu.Unlock()
	if cc == nil || cc.accepted < dialed {
		return 0, false
	}
	return cc.read.Load(), true
}

// TestStopDrainsKeepAliveClients drives 32 clients, each sending requests
// one after another on a keep-alive connection and dialling again when
// one closes, through a stop: every request whose bytes the server read
// gets an answer, either served (200) or 503 with Retry-After, and every
// 503 but /readyz's during Unready says "Connection: close"; no request
// is met by EOF or a reset on a connection the server accepted. With
// Unready first, /readyz is seen 503 while requests after it are still
// served. The clients stop when a dial is refused: the listener closed.
func TestStopDrainsKeepAliveClients(t *testing.T) {
	for _, tt := range []struct {
		name    string
		unready bool
	}{
		{"straight to Stop", false},
		{"Unready first", true},
	} {
		t.Run(tt.name, func(t *testing.T) { testDrain(t, tt.unready) })
	}
}

func testDrain(t *testing.T, unready bool) {
	const clients = 32
	var seq atomic.Uint64
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw, seq: &seq, conns: map[string]*countedConn{}}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "served")
	}))
	// Every client here sends its next request at once: none waits for
	// a request this long, so none is closed but after a 503.
	srv.conns.linger = 5 * time.Second
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := raw.Addr().String()
	stopping := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Unavailable(w, r, "stopping") })

	var (
		stopBegan   atomic.Bool // a refused dial ends a client from then on
		unreadySeen atomic.Bool // a /readyz was answered 503
		servedAfter = make(chan struct{})
		servedOnce  sync.Once
		warm        sync.WaitGroup // each client's first answer
		wg          sync.WaitGroup
		served      atomic.Int64 // 200s
		unavailable atomic.Int64 // 503s
		neverRead   atomic.Int64 // on a connection never accepted: the listener's backlog when it closed
	)
	warm.Add(clients)
	client := func(id int) {
		warmed := false
		defer func() {
			if !warmed {
				warm.Done()
			}
		}()
		var (
			c      net.Conn
			br     *bufio.Reader
			dialed uint64
			sent   int64
		)
		defer func() {
			if c != nil {
				c.Close()
			}
		}()
		for n := id; ; n++ {
			if c == nil {
				dialed = seq.Add(1)
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					// Refused, or reset when the listener closed with
					// the connection in its backlog: not accepting.
					if stopBegan.Load() && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)) {
						return
					}
					t.Errorf("client %d: dial = %v; want a connection", id, err)
					return
				}
				nc.SetDeadline(time.Now().Add(20 * time.Second))
				c, br, sent = nc, bufio.NewReader(nc), 0
			}
			path, req := "/work", "GET /work HTTP/1.1\r\nHost: x\r\n\r\n"
			switch n % 4 {
			case 0:
				path, req = "/readyz", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
			case 1:
				req = "POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
			}
			after := unreadySeen.Load()
			before := sent
			_, err := io.WriteString(c, req)
			sent += int64(len(req))
			var resp *http.Response
			if err == nil {
				if resp, err = http.ReadResponse(br, nil); err == nil {
					_, err = io.ReadAll(resp.Body)
				}
			}
			if err != nil {
				read, accepted := ln.read(c.LocalAddr().String(), dialed)
				c.Close()
				c = nil
				switch {
				case read > before:
					t.Errorf("client %d: %s %s = %v, the server having read %d bytes of it; want an answer", id, req[:4], path, err, read-before)
					return
				case accepted:
					t.Errorf("client %d: %s %s = %v, on a connection the server had accepted; want an answer", id, req[:4], path, err)
					return
				}
				neverRead.Add(1)
				continue
			}
			switch {
			case resp.StatusCode == http.StatusOK:
				served.Add(1)
				if after && path == "/work" {
					servedOnce.Do(func() { close(servedAfter) })
				}
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				unavailable.Add(1)
				if path == "/readyz" {
					unreadySeen.Store(true)
				} else if !resp.Close {
					t.Errorf("client %d: %s %s = 503 without Connection: close; want it", id, req[:4], path)
					return
				}
				if path != "/readyz" && !stopBegan.Load() {
					t.Errorf("client %d: %s %s = 503 before Stop; want it served", id, req[:4], path)
					return
				}
			default:
				t.Errorf("client %d: %s %s = %s (Retry-After %q); want 200, or 503 with Retry-After", id, req[:4], path, resp.Status, resp.Header.Get("Retry-After"))
				return
			}
			if !warmed {
				warmed = true
				warm.Done()
			}
			if resp.Close {
				c.Close()
				c = nil
			}
		}
	}
	for id := range clients {
		wg.Go(func() { client(id) })
	}
	warm.Wait() // every client has its keep-alive connection

	cut, unreadyDone := make(chan struct{}), make(chan struct{})
	stopped := make(chan error, 1)
	go func() {
		if unready {
			srv.Unready(stopping, 10*time.Second, cut)
		}
		close(unreadyDone)
		stopBegan.Store(true)
		stopped <- srv.Stop(stopping, 10*time.Second)
	}()
	if unready {
		select {
		case <-servedAfter:
			close(cut)
		case <-unreadyDone:
			t.Errorf("Unready's 10 s ended before /readyz was seen 503 and a request after that served")
		}
	}
	wg.Wait()
	if err := <-stopped; err != nil {
		t.Errorf("Stop = %v; want nil", err)
	}
	t.Logf("%d served, %d answered 503, %d sent on a connection never accepted (the listener's backlog when it closed)",
		served.Load(), unavailable.Load(), neverRead.Load())
}

// TestStopAnswersOnIdleConnection sends a request on a keep-alive
// connection that was idle when Stop began: within its linger it is
// answered, 503 closing the connection, not closed under the request.
func TestStopAnswersOnIdleConnection(t *testing.T) {
	srv, _, entered, release, dial := slowServer(t, 10*time.Second)
	idle, idleR := dial()
	if _, body := send(t, idle, idleR, "/before"); body != "served" {
		t.Fatalf("GET /before = %q; want %q", body, "served")
	}
	slow, slowR := dial() // keeps Stop from closing the listener
	io.WriteString(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(answer("stopping"), 10*time.Second) }()
	for giveUp := time.Now().Add(10 * time.Second); ; { // until Stop has set its handler
		c, br := dial()
		if _, body := send(t, c, br, "/probe"); body == "stopping" {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatal("Stop never set its handler")
		}
	}
	resp, body := send(t, idle, idleR, "/after")
	if body != "stopping" || !resp.Close {
		t.Errorf("GET /after on the idle connection = %q, closing the connection: %v; want %q, closing it", body, resp.Close, "stopping")
	}
	if _, err := idleR.ReadByte(); err != io.EOF {
		t.Errorf("the idle connection after its answer: %v; want EOF", err)
	}
	close(release)
	if _, err := http.ReadResponse(slowR, nil); err != nil {
		t.Errorf("the request under way: %v; want its answer", err)
	}
	slow.Close() // or Stop would wait for its linger
	if err := <-stopped; err != nil {
		t.Errorf("Stop = %v; want nil", err)
	}
}
