// Package wire frames the HTTP requests and responses that the wasm host
// passes to the edge module and back: length-prefixed fields in one
// buffer, so a call costs one copy each way and no parsing beyond it.
package wire

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// Request is an HTTP request as the module sees it.
type Request struct {
	Method     string
	URI        string // path and query, as sent
	RemoteAddr string
	Header     http.Header
	Body       []byte
}

// Response is the module's answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// The request's log line, which the host writes (natively, where it
	// costs a tenth): its path as it may be logged and its route; an
	// empty route when the module answered before it knew the route (a
	// frame it could not read, a handler's panic), and the host logs the
	// line with its own.
	LogPath, LogRoute string
}

var errShort = errors.New("wire: truncated or malformed frame")

// AppendRequest appends the encoding of r to b.
func AppendRequest(b []byte, r *Request) []byte {
	b = appendStr(b, r.Method)
	b = appendStr(b, r.URI)
	b = appendStr(b, r.RemoteAddr)
	b = appendHeader(b, r.Header)
	return appendBytes(b, r.Body)
}

// ParseRequest decodes a request encoded by AppendRequest. The body
// aliases b.
func ParseRequest(b []byte) (*Request, error) {
	d := decoder{b: b}
	r := &Request{Method: d.str(), URI: d.str(), RemoteAddr: d.str()}
	r.Header = d.header()
	r.Body = d.bytes()
	return r, d.done()
}

// AppendResponse appends the encoding of r to b.
func AppendResponse(b []byte, r *Response) []byte {
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendHeader(b, r.Header)
	b = appendBytes(b, r.Body)
	b = appendStr(b, r.LogPath)
	return appendStr(b, r.LogRoute)
}

// ParseResponse decodes a response encoded by AppendResponse. The body
// aliases b.
func ParseResponse(b []byte) (*Response, error) {
	d := decoder{b: b}
	r := &Response{Status: int(d.uint())}
	r.Header = d.header()
	r.Body = d.bytes()
	r.LogPath, r.LogRoute = d.str(), d.str()
	return r, d.done()
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b, p []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			b = appendStr(b, k)
			b = appendStr(b, v)
		}
	}
	return b
}

type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if d.bad || n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	l := d.uint()
	if d.bad || l > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	p := d.b[:l:l]
	d.b = d.b[l:]
	return p
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) header() http.Header {
	n := d.uint()
	if d.bad || n > uint64(len(d.b))/2 {
		d.bad = true
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k := d.str()
		v := d.str()
		if d.bad {
			return nil
		}
		h[k] = append(h[k], v)
	}
	return h
}

func (d *decoder) done() error {
	if d.bad || len(d.b) != 0 {
		return errShort
	}
	return nil
}
