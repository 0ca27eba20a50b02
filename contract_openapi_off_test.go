//go:build race || noopenapi || wasip1

package main

import "net/http"

// ctCheckOpenAPI holds nothing to openapi.json in this build: the
// document's validator and its dependencies take minutes to compile under
// the race detector's and the fuzzer's instrumentation, and in a first
// build, so those builds (and ./test.sh's quick run, tagged noopenapi)
// leave the check to the builds without them. GOOS=wasip1 builds this
// package's tests only for go vet (the edge module's tests run on the
// native host), which need not compile the validator for wasm (./test.sh full runs the
// contract suite so on the native binary, the edge module and Redis).
func ctCheckOpenAPI(method, url string, header http.Header, body []byte, r ctResp) error {
	return nil
}

// ctCheckWebhookOpenAPI holds nothing to openapi.json in this build.
func ctCheckWebhookOpenAPI(header http.Header, body []byte) error { return nil }
