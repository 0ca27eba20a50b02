package main

import (
	"context"
	"encoding/json"
	"errors"
	"unsafe"

	"deeplink/internal/egress"
	"deeplink/internal/wire"
)

// hostFetch is deeplink_host.fetch: it fetches the files of the Fetch
// request at req (JSON) and returns the length n of its answer, written
// at out when n <= out_cap. The module has no sockets (wasip1); the host
// fetches under the same egress rules as the native build.
//
//go:wasmimport deeplink_host fetch
func hostFetch(req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) uint32

// getFiles has the host fetch urls at once, reading at most limit bytes
// of each answer.
func (s *server) getFiles(_ context.Context, urls []string, limit int64) ([]egress.File, error) {
	req, err := json.Marshal(wire.Fetch{URLs: urls, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]byte, wire.FetchReplyCap(len(urls), limit))
	n := hostFetch(unsafe.Pointer(unsafe.SliceData(req)), uint32(len(req)), unsafe.Pointer(unsafe.SliceData(out)), uint32(len(out)))
	if int(n) > len(out) {
		return nil, errors.New("the host's answer to the check does not fit the module's buffer")
	}
	var files []egress.File
	if err := json.Unmarshal(out[:n], &files); err != nil || len(files) != len(urls) {
		return nil, errors.New("the host's answer to the check is malformed")
	}
	return files, nil
}
