package main

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is the error body of docs/api.md:
//
//	{"error": {"code": "...", "message": "...", "fields": [...]}}
type apiError struct {
	Status  int          `json:"-"`
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []fieldError `json:"fields,omitempty"`

	retryAfter int // seconds; sent as Retry-After when positive
}

// fieldError names one invalid field of a 422 answer.
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

var (
	errStoreNotFound = &apiError{Status: http.StatusNotFound, Code: "store_not_found", Message: "no store with that id"}
	errNotFound      = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no such resource"}
	errUnauthorized  = &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "X-API-Key is missing or is not a key of this store"}
	errMediaType     = &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Message: "Content-Type must be application/json"}
	errBodyTooLarge  = &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "the body is larger than 64 KiB"}
	errInvalidJSON   = &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is not one JSON object"}
	errCodeConflict  = &apiError{Status: http.StatusConflict, Code: "auth_code_conflict", Message: "that auth_code is already registered for this store"}
	errRedirectHost  = &apiError{Status: http.StatusBadRequest, Code: "redirect_uri_not_allowed", Message: "redirect_uri is not on a domain of this store"}
	errFull          = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the service is over its memory budget; retry later", retryAfter: 5}
	errPersist       = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the service cannot persist its state; retry later", retryAfter: 5}
	errStoreDown     = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the service cannot reach its store; retry later", retryAfter: 2}
	errShuttingDown  = &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the service is shutting down; retry shortly", retryAfter: 2}
)

func validationError(fields []fieldError) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: "validation_failed", Message: "some fields are missing or invalid", Fields: fields}
}

// writeError writes e as the JSON error body with its status.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON writes v as a JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"cannot encode the answer"}}`)
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// okBody is the success body of the register endpoint.
var okBody = []byte(`{"data":{"status":"ok"}}` + "\n")

// Header values shared by every response that sends them, so the hot path
// allocates none. net/http only reads them.
var (
	jsonContentType = []string{"application/json"}
	okBodyLength    = []string{strconv.Itoa(len(okBody))}
)
