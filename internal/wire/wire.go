// Package wire frames the HTTP requests and responses that the wasm host
// passes to the edge module and back: length-prefixed fields in one
// buffer, so a call costs one copy each way and no parsing beyond it.
package wire

import (
	"encoding/binary"
	"errors"
	"net/http"

	"deeplink/internal/binfield"
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
	b = binfield.AppendStr(b, r.Method)
	b = binfield.AppendStr(b, r.URI)
	b = binfield.AppendStr(b, r.RemoteAddr)
	b = appendHeader(b, r.Header)
	return binfield.AppendBytes(b, r.Body)
}

// ParseRequest decodes a request encoded by AppendRequest. The body
// aliases b.
func ParseRequest(b []byte) (*Request, error) {
	d := binfield.NewReader(b)
	r := &Request{Method: d.Str(), URI: d.Str(), RemoteAddr: d.Str()}
	r.Header = readHeader(d)
	r.Body = d.Bytes()
	return r, done(d)
}

// AppendResponse appends the encoding of r to b.
func AppendResponse(b []byte, r *Response) []byte {
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = appendHeader(b, r.Header)
	b = binfield.AppendBytes(b, r.Body)
	b = binfield.AppendStr(b, r.LogPath)
	return binfield.AppendStr(b, r.LogRoute)
}

// ParseResponse decodes a response encoded by AppendResponse. The body
// aliases b.
func ParseResponse(b []byte) (*Response, error) {
	d := binfield.NewReader(b)
	r := &Response{Status: int(d.Uint())}
	r.Header = readHeader(d)
	r.Body = d.Bytes()
	r.LogPath, r.LogRoute = d.Str(), d.Str()
	return r, done(d)
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			b = binfield.AppendStr(b, k)
			b = binfield.AppendStr(b, v)
		}
	}
	return b
}

func readHeader(d *binfield.Reader) http.Header {
	n := d.Uint()
	if d.Bad() || n > uint64(d.Len())/2 {
		d.Fail()
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k := d.Str()
		v := d.Str()
		if d.Bad() {
			return nil
		}
		h[k] = append(h[k], v)
	}
	return h
}

// done is the error of a frame d read: errShort unless every field was
// whole and nothing is left.
func done(d *binfield.Reader) error {
	if !d.Done() {
		return errShort
	}
	return nil
}
