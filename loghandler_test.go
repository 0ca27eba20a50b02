package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLineHandlerMatchesJSONHandler checks that lineHandler writes the
// same JSON lines as slog.JSONHandler, value for value.
func TestLineHandlerMatchesJSONHandler(t *testing.T) {
	at := time.Date(2026, 11, 21, 14, 4, 0, 584308393, time.UTC)
	tests := []struct {
		name  string
		attrs []slog.Attr
	}{
		{"request line", []slog.Attr{
			slog.String("method", "POST"), slog.String("path", "/stores/x/auth/auth-code"),
			slog.Int("status", 200), slog.Int64("bytes", 25), slog.Duration("duration", 52478*time.Nanosecond),
		}},
		{"escapes", []slog.Attr{slog.String("s", "q\"b\\n\n\t\x01<>&\u2028é\xff")}},
		{"kinds", []slog.Attr{
			slog.Bool("b", true), slog.Uint64("u", 7), slog.Time("t", at), slog.Any("err", errors.New("boom")),
			slog.Any("list", []string{"a"}),
		}},
		{"group falls back", []slog.Attr{slog.Group("g", slog.Int("a", 1))}},
		{"float falls back", []slog.Attr{slog.Float64("f", 1.5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got, want bytes.Buffer
			r := slog.NewRecord(at, slog.LevelWarn, "msg \"x\"", 0)
			r.AddAttrs(tt.attrs...)
			if err := newLineHandler(&got, slog.LevelInfo).Handle(t.Context(), r); err != nil {
				t.Fatal(err)
			}
			if err := slog.NewJSONHandler(&want, nil).Handle(t.Context(), r); err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got.Bytes(), &g); err != nil {
				t.Fatalf("lineHandler wrote %q, not JSON: %v", got.String(), err)
			}
			json.Unmarshal(want.Bytes(), &w)
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			if !bytes.Equal(gj, wj) || !bytes.HasSuffix(got.Bytes(), []byte("}\n")) {
				t.Errorf("lineHandler wrote\n%s\nslog.JSONHandler\n%s", got.String(), want.String())
			}
		})
	}
}

func TestLineHandlerLevel(t *testing.T) {
	h := newLineHandler(&bytes.Buffer{}, slog.LevelInfo)
	if h.Enabled(t.Context(), slog.LevelDebug) || !h.Enabled(t.Context(), slog.LevelError) {
		t.Errorf("Enabled: want debug off, error on")
	}
}

// TestRequestLineMatchesRecord checks that the direct request line is byte
// for byte the line lineHandler writes for the record server.logRequest
// builds for any other handler.
func TestRequestLineMatchesRecord(t *testing.T) {
	at := time.Date(2026, 11, 21, 14, 4, 0, 584308393, time.UTC)
	tests := []struct {
		method, path, route string
		status              int
		n                   int64
		d                   time.Duration
	}{
		{"POST", "/stores/7c9e6679-7425-40de-944b-e07fc1f90ae7/auth/auth-code", "POST /stores/{store_id}/auth/auth-code", 200, 25, 52478},
		{"GET", "/a\"b\\c/\u2028/é/\xff/<x>&", "unmatched", 404, 0, 0},
		{"PATCH", "/", "unmatched", 405, -1, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var direct, viaRecord bytes.Buffer
			if err := newLineHandler(&direct, slog.LevelInfo).request(at, tt.method, tt.path, tt.route, tt.status, tt.n, tt.d, "req-1"); err != nil {
				t.Fatal(err)
			}
			r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
			r.AddAttrs(slog.String("method", tt.method), slog.String("path", tt.path), slog.String("route", tt.route),
				slog.Int("status", tt.status), slog.Int64("bytes", tt.n), slog.Duration("duration", tt.d),
				slog.String("request_id", "req-1"))
			if err := newLineHandler(&viaRecord, slog.LevelInfo).Handle(t.Context(), r); err != nil {
				t.Fatal(err)
			}
			if direct.String() != viaRecord.String() {
				t.Errorf("request(%q) =\n%s\nwant (via a record)\n%s", tt.path, direct.String(), viaRecord.String())
			}
		})
	}
}

// FuzzAppendJSONString checks appendJSONString against log/slog's own
// JSONHandler, which it must match byte for byte: the message of a record
// with nothing else is written as {"msg":<the string>}.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "/stores/x/auth/auth-code", `a"b\c`, "<&>\x7f\x00\x1f\n\r\t", "\u2028\u2029é", "\xff\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
				return slog.Attr{}
			}
			return a
		}})
		h.Handle(context.Background(), slog.NewRecord(time.Time{}, slog.LevelInfo, s, 0))
		want := strings.TrimSuffix(strings.TrimPrefix(buf.String(), `{"msg":`), "}\n")
		if got := string(appendJSONString(nil, s)); got != want {
			t.Fatalf("appendJSONString(%q) = %s; want %s", s, got, want)
		}
	})
}
