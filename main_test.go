package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestStartingHandler: while the state is restored, /healthz is 200 and
// everything else 503 with Retry-After, in the form each endpoint answers
// errors in, and every request has its log line.
func TestStartingHandler(t *testing.T) {
	var logged bytes.Buffer
	h := startingHandler(slog.New(newLineHandler(&logged, slog.LevelInfo)))
	const store = "/stores/7c9e6679-7425-40de-944b-e07fc1f90ae7"
	tests := []struct {
		method, path string
		status       int
		ctype, body  string // body: a part of it
	}{
		{"GET", "/healthz", 200, "application/json", `{"data":{"status":"ok"}}`},
		{"GET", "/readyz", 503, "application/json", `"code":"unavailable"`},
		{"POST", store + "/auth/auth-code", 503, "application/json", `"code":"unavailable"`},
		{"POST", store + "/auth/token", 503, "application/json", `{"error":"temporarily_unavailable","error_description":`},
		{"GET", store + "/auth/callback?code=c&state=s", 503, "text/html; charset=utf-8", "<h1>Sign-in failed</h1>"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.status || rec.Header().Get("Content-Type") != tt.ctype || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("%s %s = %d %q %s; want %d %q containing %s", tt.method, tt.path, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.status, tt.ctype, tt.body)
		}
		if want := tt.status == 503; (rec.Header().Get("Retry-After") != "") != want {
			t.Errorf("%s %s: Retry-After %q; want one: %v", tt.method, tt.path, rec.Header().Get("Retry-After"), want)
		}
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, len(tests), "one log line a request")
	for i, line := range lines {
		var l struct {
			Route, Path string
			Status      int
		}
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		assert.Equal(t, "starting", l.Route)
		assert.Equal(t, tests[i].status, l.Status)
		assert.NotContains(t, line, "code=c", "no query in the log")
	}
}
