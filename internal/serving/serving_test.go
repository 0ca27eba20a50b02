package serving

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func answer(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) })
}

func get(h http.Handler) string {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	return w.Body.String()
}

// TestSwitch checks that a handlerSwitch serves its first target until
// set, then the new one, and that set may race requests.
func TestSwitch(t *testing.T) {
	s := new(handlerSwitch)
	s.set(answer("starting"))
	if got := get(s); got != "starting" {
		t.Fatalf("before Set: %q; want %q", got, "starting")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if got := get(s); got != "starting" && got != "serving" {
					t.Errorf("during Set: %q", got)
					return
				}
			}
		})
	}
	s.set(answer("serving"))
	wg.Wait()
	if got := get(s); got != "serving" {
		t.Fatalf("after Set: %q; want %q", got, "serving")
	}
}

func TestDemoHost(t *testing.T) {
	tests := []struct {
		ip   net.IP
		want string
	}{
		{net.IPv4(127, 0, 0, 1), "127.0.0.1:8080"},
		{net.IPv4zero, "127.0.0.1:8080"}, // every address: reached at loopback
		{net.IPv6unspecified, "127.0.0.1:8080"},
		{net.IPv6loopback, "localhost:8080"},
		{net.IPv4(192, 0, 2, 7), "192.0.2.7:8080"}, // not a loopback: as it is, with a warning
	}
	for _, tt := range tests {
		if got := DemoHost(&net.TCPAddr{IP: tt.ip, Port: 8080}); got != tt.want {
			t.Errorf("DemoHost(%v) = %q; want %q", tt.ip, got, tt.want)
		}
	}
}

// serve serves h through NewServer on a loopback port, until the test ends.
func serve(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	srv := NewServer(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

// send writes a request to path on c and reads its answer.
func send(t *testing.T, c net.Conn, br *bufio.Reader, path string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestStopAnswersWhileRequestsFinish: once Stop has begun, and while a
// request from before is under way, new connections are still accepted and
// get the stopping handler's answer (so /readyz can say 503), each on a
// connection closed after it; idle keep-alives are closed after their
// linger, with EOF, not a reset; Stop returns when the request under way
// has been answered (and its connection has lingered), and only then does
// the listener close.
func TestStopAnswersWhileRequestsFinish(t *testing.T) {
	// The linger is short, for the idle connection's close, but longer
	// than a new connection may wait to have its request read on a loaded
	// machine: one that waited past it would be closed, unanswered, as
	// Stop closes every connection waiting for a request after its linger.
	srv, addr, entered, release, dial := slowServer(t, 500*time.Millisecond)
	idle, idleR := dial()
	if _, body := send(t, idle, idleR, "/before"); body != "served" {
		t.Fatalf("GET /before = %q; want %q", body, "served")
	}
	slow, slowR := dial()
	io.WriteString(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	stopped := make(chan error, 1)
	go func() {
		stopped <- srv.Stop(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "stopping")
		}), 10*time.Second)
	}()
	// Until Stop has set its handler, a new connection is served as before.
	for giveUp := time.Now().Add(10 * time.Second); ; {
		c, br := dial()
		resp, body := send(t, c, br, "/readyz")
		if body == "served" {
			if time.Now().After(giveUp) {
				t.Fatal("Stop never set its handler")
			}
			continue
		}
		if resp.StatusCode != http.StatusServiceUnavailable || body != "stopping" || !resp.Close {
			t.Fatalf("GET /readyz while stopping = %d %q, closing the connection: %v; want 503 %q, closing it", resp.StatusCode, body, resp.Close, "stopping")
		}
		break
	}
	if _, err := idleR.ReadByte(); err != io.EOF {
		t.Errorf("the idle keep-alive connection, read while stopping: %v; want EOF", err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with a request under way", err)
	default:
	}

	close(release)
	resp, err := http.ReadResponse(slowR, nil)
	if err != nil {
		t.Fatalf("the request under way: %v", err)
	}
	// Its response was under way when Stop began: it does not say
	// "Connection: close", and the connection lingers as an idle one.
	if body, _ := io.ReadAll(resp.Body); string(body) != "served" {
		t.Errorf("the request under way = %q; want %q", body, "served")
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop = %v; want nil", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("a connection was accepted after Stop returned")
	}
}

// TestStopCutsOffLateRequests sends a request whose body is still
// arriving when Stop's grace runs out: once Stop has returned (and the
// caller writes the state), the rest of the body gets no answer, so nothing
// acknowledged can be missing from the state written.
func TestStopCutsOffLateRequests(t *testing.T) {
	reading := make(chan struct{})
	srv, addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(reading)
		io.ReadAll(r.Body)
		w.Write([]byte("acknowledged"))
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf "); err != nil {
		t.Fatal(err)
	}
	<-reading

	if err := srv.Stop(answer("stopping"), 50*time.Millisecond); err == nil {
		t.Errorf("Stop with a request cut off = nil; want an error")
	}
	io.WriteString(c, "done!") // may fail: the connection is closed
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("after Stop returned, the request was answered %s %q", resp.Status, body)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the connection was left open: %v", err)
	}
}

func TestCutPath(t *testing.T) {
	long := "/" + strings.Repeat("p", 2*MaxLoggedPath)
	for _, tt := range []struct{ in, want string }{
		{"/healthz", "/healthz"},
		{long[:MaxLoggedPath], long[:MaxLoggedPath]},
		{long, long[:MaxLoggedPath] + "…(1025 bytes)"},
		// A query string escaped into the path: its codes stay out.
		{"/stores/s/auth/callback?code=secret-code&state=x", "/stores/s/auth/callback…(48 bytes)"},
		{"/p#code=secret", "/p…(14 bytes)"},
		{long[:MaxLoggedPath] + "?code=secret", long[:MaxLoggedPath] + "…(524 bytes)"},
	} {
		if got := CutPath(tt.in); got != tt.want {
			t.Errorf("CutPath(%.20q… %d bytes) = %.20q… %d bytes; want %d bytes", tt.in, len(tt.in), got, len(got), len(tt.want))
		}
	}
}

func TestLoggedPath(t *testing.T) {
	store := func(s string) bool { return s == "st1" }
	for _, tt := range []struct {
		path, pattern string
		isStore       func(string) bool
		want          string
	}{
		{"/stores/st1/webhooks/we_x", "/stores/{store_id}/webhooks/{endpoint_id}", store, "/stores/st1/webhooks/{endpoint_id}"},
		{"/stores/ak_live_x/webhooks", "/stores/{store_id}/webhooks", store, "/stores/{store_id}/webhooks"},
		{"/stores/st1/webhooks", "/stores/{store_id}/webhooks", nil, "/stores/{store_id}/webhooks"},
		{"/", "/{$}", nil, "/"},
		{"/dashboard/static/app.css", "/dashboard/static/", nil, "/dashboard/static/"},
		{"/stores/st1/ak_live_x/", "", store, "/stores/st1/…/"},
		{"/stores/st1/webhooks", "", nil, "/stores/…/webhooks"},
		{"/", "", nil, "/"},
		{"//x", "", nil, "//…"},
	} {
		if got := LoggedPath(tt.path, tt.pattern, tt.isStore); got != tt.want {
			t.Errorf("LoggedPath(%q, %q) = %q; want %q", tt.path, tt.pattern, got, tt.want)
		}
	}
}

// slowServer serves "served" to every request, but holds one for /slow
// until release is closed, once it has closed entered; its connections
// linger as long as linger after Stop. It listens at addr; dial opens a
// connection to it.
func slowServer(t *testing.T, linger time.Duration) (srv *Server, addr string, entered, release chan struct{}, dial func() (net.Conn, *bufio.Reader)) {
	entered, release = make(chan struct{}), make(chan struct{})
	srv, addr = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "served")
	}))
	srv.conns.linger = linger
	dial = func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	return srv, addr, entered, release, dial
}
