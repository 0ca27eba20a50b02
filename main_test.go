package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShutdownCutsOffLateRequests sends a request whose body is still
// arriving when shutdown's grace runs out: once shutdown has returned (and
// run writes the state), the rest of the body gets no answer, so nothing
// acknowledged can be missing from the state written.
func TestShutdownCutsOffLateRequests(t *testing.T) {
	reading := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(reading)
		io.ReadAll(r.Body)
		w.Write([]byte("acknowledged"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf ")
	require.NoError(t, err)
	<-reading

	shutdown(srv, 50*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	io.WriteString(c, "done!") // may fail: the connection is closed
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("after shutdown returned, the request was answered %s %q", resp.Status, body)
	}
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection was left open: %v", err)
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
		if got := demoHost(&net.TCPAddr{IP: tt.ip, Port: 8080}); got != tt.want {
			t.Errorf("demoHost(%v) = %q; want %q", tt.ip, got, tt.want)
		}
	}
}
