//go:build !wasip1

package main

import (
	"bytes"
	"deeplink/internal/serving"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartingHandler: while the state is restored, /healthz is 200 and
// everything else 503 with Retry-After, in the form each endpoint answers
// errors in, and every request has its log line, with the id its
// response's X-Request-Id carries, and is counted.
func TestStartingHandler(t *testing.T) {
	var logged bytes.Buffer
	m := &serving.Metrics{}
	h := unavailableHandler(newLogger(&logged), m, "starting", "the service is starting (restoring its state); retry shortly")
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
	var ids []string
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		ids = append(ids, rec.Header().Get("X-Request-Id"))
		if !validID(ids[len(ids)-1]) {
			t.Errorf("%s %s: X-Request-Id %q; want a new id", tt.method, tt.path, ids[len(ids)-1])
		}
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
			RequestID   string `json:"request_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		assert.Equal(t, "starting", l.Route)
		assert.Equal(t, tests[i].status, l.Status)
		assert.Equal(t, ids[i], l.RequestID, "the log line's request_id is the response's X-Request-Id")
		assert.NotContains(t, line, "code=c", "no query in the log")
	}
	rec := httptest.NewRecorder()
	(&server{metrics: m}).serveMetrics(rec, httptest.NewRequest("GET", "/metrics", nil))
	assert.Equal(t, 1.0, metricValue(t, rec.Body.String(), `deeplink_http_requests_total{method="GET",route="starting",status="200"}`))
	assert.Equal(t, 2.0, metricValue(t, rec.Body.String(), `deeplink_http_requests_total{method="GET",route="starting",status="503"}`))
	assert.Equal(t, 2.0, metricValue(t, rec.Body.String(), `deeplink_http_requests_total{method="POST",route="starting",status="503"}`))
}

func TestFirstLine(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{errors.New("disk full"), "disk full"},
		{errors.Join(errors.New("a"), errors.New("b"), errors.New("c")), "a (and 2 more)"},
		{errors.Join(errors.New("a"), errors.Join(errors.New("b"), errors.New("c"))), "a (and 2 more)"},
	} {
		if got := firstLine(tt.err); got != tt.want {
			t.Errorf("firstLine(%q) = %q; want %q", tt.err, got, tt.want)
		}
	}
}
