package main

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument is openapi.json, the OpenAPI 3.1 document of the HTTP
// API: every route of routes() but the dashboard's and the demo's has an
// operation there (openapi_test.go), and the contract tests hold every
// request and answer they make to it (contract_openapi_test.go).
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI is GET /openapi.json: the document as it is in the binary.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.Write(openAPIDocument)
}
