package hoststore

import "unsafe"

// The host functions of the module deeplink_store, as the edge host
// (wasm/) provides them. One buffer convention for both:
//
//	call(req, req_len, out, out_cap) -> n
//
// serves the request frame at req and returns the length n of its reply:
// written at out when n <= out_cap; otherwise the host keeps it for
//
//	result(out, n)
//
// which the module calls next, with a buffer of n bytes. Either way the
// operation is done once.
//
//go:wasmimport deeplink_store call
func hostCall(req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) uint32

//go:wasmimport deeplink_store result
func hostResult(out unsafe.Pointer, n uint32)

// replyBuf holds each reply while the client decodes it (copying what it
// keeps). A module runs one call at a time, and a host call never yields
// to another goroutine, so one buffer does.
var replyBuf = make([]byte, 64<<10)

// Imported returns the Client of the host's deeplink_store functions.
func Imported() *Client { return NewClient(callHost) }

func callHost(req []byte) []byte {
	n := hostCall(unsafe.Pointer(unsafe.SliceData(req)), uint32(len(req)), unsafe.Pointer(unsafe.SliceData(replyBuf)), uint32(len(replyBuf)))
	if int(n) <= len(replyBuf) {
		return replyBuf[:n]
	}
	big := make([]byte, n)
	hostResult(unsafe.Pointer(unsafe.SliceData(big)), n)
	return big
}
