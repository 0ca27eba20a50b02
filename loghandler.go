package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// lineHandler is a slog.Handler writing each record as one JSON line, as
// slog.JSONHandler does, but formatting the flat records this service logs
// directly instead of through its generic machinery: a line per request is
// in the contract, and slog.JSONHandler spent about 2 µs on each. Records it
// does not format itself (groups, LogValuers, values JSON cannot encode),
// and handlers derived with WithAttrs or WithGroup, go to slog.JSONHandler.
type lineHandler struct {
	w        io.Writer // written one whole line per call
	level    slog.Leveler
	fallback slog.Handler
}

// newLogger is the service's logger, writing JSON lines of level INFO and
// above to w, both builds'.
func newLogger(w io.Writer) *slog.Logger { return slog.New(newLineHandler(w, slog.LevelInfo)) }

func newLineHandler(w io.Writer, level slog.Leveler) *lineHandler {
	return &lineHandler{w: w, level: level, fallback: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler { return h.fallback.WithAttrs(as) }

func (h *lineHandler) WithGroup(name string) slog.Handler { return h.fallback.WithGroup(name) }

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	buf := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(buf)
	b := append((*buf)[:0], `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, r.Level.String()...)
	b = append(b, `","msg":`...)
	b = appendJSONString(b, r.Message)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		b = append(b, ',')
		b = appendJSONString(b, a.Key)
		b = append(b, ':')
		b, ok = appendJSONValue(b, a.Value.Resolve())
		return ok
	})
	if !ok {
		return h.fallback.Handle(ctx, r)
	}
	b = append(b, "}\n"...)
	*buf = b
	_, err := h.w.Write(b)
	return err
}

// request writes the line of one served request, the same line Handle
// writes for the record server.logRequest would otherwise build, without
// the record: the hot path of every request.
func (h *lineHandler) request(t time.Time, method, path, route string, status int, n int64, d time.Duration, id string) error {
	buf := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(buf)
	b := append((*buf)[:0], `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","method":`...)
	b = appendJSONString(b, method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, path)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, n, 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendInt(b, int64(d), 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, id)
	b = append(b, "}\n"...)
	*buf = b
	_, err := h.w.Write(b)
	return err
}

// appendJSONValue appends v as slog.JSONHandler would, or reports false
// for kinds it leaves to it.
func appendJSONValue(b []byte, v slog.Value) ([]byte, bool) {
	switch v.Kind() {
	case slog.KindString:
		return appendJSONString(b, v.String()), true
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10), true
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10), true
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool()), true
	case slog.KindDuration:
		return strconv.AppendInt(b, int64(v.Duration()), 10), true
	case slog.KindTime:
		b = append(b, '"')
		b = v.Time().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), true
	case slog.KindAny:
		if err, isErr := v.Any().(error); isErr {
			return appendJSONString(b, err.Error()), true
		}
		j, err := json.Marshal(v.Any())
		if err != nil {
			return b, false
		}
		return append(b, j...), true
	}
	return b, false
}

// appendJSONString appends s as a JSON string, byte for byte as
// log/slog's JSONHandler writes it: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced, U+2028 and U+2029 escaped.
// Runs of characters that stand for themselves, most of a log line, are
// appended whole. FuzzAppendJSONString checks it against slog.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0 // s[start:i] is still to be appended as it is
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), `\u202`...)
			b = append(b, hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonSafe[c] reports whether the ASCII byte c stands for itself in a JSON
// string: printable, and neither a quote nor a backslash.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
