package main

import (
	"context"
	"deeplink/internal/config"
	"deeplink/internal/store"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxBody is the largest request body any endpoint reads (docs/api.md).
const maxBody = 64 << 10

// The length of an auth code, in characters (docs/api.md, registering a code).
const minCodeLen, maxCodeLen = 16, 255

// jsonString is a string field of a request body that remembers whether it
// was present and whether it was a string at all, so that validation can
// report every bad field rather than the first type error.
type jsonString struct {
	s     string
	set   bool   // present and not null
	bad   string // why the raw value is unacceptable, if it is
	plain bool   // s is printable ASCII: no control characters, one byte a character
}

// registerRequest is the body of POST /stores/{store_id}/auth/auth-code.
type registerRequest struct {
	AuthCode          jsonString `json:"auth_code"`
	RedirectURI       jsonString `json:"redirect_uri"`
	ClientReferenceID jsonString `json:"client_reference_id"`
	CodeChallenge     jsonString `json:"code_challenge"`
	State             jsonString `json:"state"`
	FirstName         jsonString `json:"first_name"`
	LastName          jsonString `json:"last_name"`
	Language          jsonString `json:"language"`
	Currency          jsonString `json:"currency"`
	Country           jsonString `json:"country"`
	Timezone          jsonString `json:"timezone"`
}

// decode fills r from the JSON body b by decodeObject's rules: member
// names match exactly, and unknown members are ignored.
func (r *registerRequest) decode(b []byte) error {
	*r = registerRequest{}
	return decodeObject(b, r)
}

// recordBufs holds buffers to encode registered codes into: the store
// copies what it keeps, so one buffer serves request after request.
var recordBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// bodyPool holds buffers of maxBody+1 bytes, so reading a body never
// allocates and never holds more than the limit.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, maxBody+1); return &b }}

// readBody reads r's body into a pooled buffer, which the caller returns
// with bodyPool.Put(buf) once done with b. It fails with errBodyTooLarge past
// maxBody.
func readBody(r *http.Request) (b []byte, buf *[]byte, err error) {
	if r.ContentLength > maxBody {
		return nil, nil, errBodyTooLarge
	}
	buf = bodyPool.Get().(*[]byte)
	n, err := io.ReadFull(r.Body, *buf)
	switch {
	case err == nil: // filled the buffer: one byte over the limit
		bodyPool.Put(buf)
		return nil, nil, errBodyTooLarge
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return (*buf)[:n], buf, nil
	default:
		bodyPool.Put(buf)
		return nil, nil, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "could not read the body"}
	}
}

// isJSON reports whether the Content-Type is application/json, parameters
// such as charset allowed.
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// storeFor returns the store named by the request path, or writes 404.
func (s *server) storeFor(w http.ResponseWriter, r *http.Request) *StoreConfig {
	return s.storeNamed(w, r.PathValue("store_id"))
}

// storeNamed returns the store whose id is id, or writes 404.
func (s *server) storeNamed(w http.ResponseWriter, id string) *StoreConfig {
	st := s.cfg.Store(id)
	if st == nil {
		writeError(w, errStoreNotFound)
	}
	return st
}

// handleRegister is POST /stores/{store_id}/auth/auth-code (docs/api.md),
// behind serveStore. Checks run in this order, the first that fails
// answering (the order the external contract fixes): store, the
// key-guessing guard (429), the key and the key's request budget (429)
// (serveStore), media type, shutting down (503), size, JSON, fields
// (every bad one at once), redirect host, conflict, capacity (the store's
// share of live entries, then the service's cap).
func (s *server) handleRegister(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, errMediaType)
		return
	}
	if s.draining.Load() {
		writeError(w, errShuttingDown)
		return
	}
	body, buf, err := readBody(r)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	var req registerRequest
	err = req.decode(body)
	bodyPool.Put(buf)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if e := s.register(r.Context(), st, &req); e != nil {
		writeError(w, e)
		return
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = okBodyLength
	w.Write(okBody)
}

func asAPIError(err error) *apiError {
	var e *apiError
	if errors.As(err, &e) {
		return e
	}
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
}

// register validates req and stores the code for st. It returns the error
// to answer, or nil once the code is live.
func (s *server) register(ctx context.Context, st *StoreConfig, req *registerRequest) *apiError {
	fields, redirectOK := s.validateRegister(st, req)
	if len(fields) > 0 {
		return validationError(fields)
	}
	if !redirectOK {
		return errRedirectHost
	}
	rec := codeRecord{
		RedirectURI:   req.RedirectURI.s,
		CodeChallenge: req.CodeChallenge.s,
		Player: Player{
			ClientReferenceID: req.ClientReferenceID.s,
			FirstName:         req.FirstName.s,
			LastName:          req.LastName.s,
			Language:          req.Language.s,
			Currency:          req.Currency.s,
			Country:           req.Country.s,
			Timezone:          req.Timezone.s,
		},
	}
	exp := s.now().Add(s.cfg.AuthCodeTTL.D())
	ck := codeKey(st.ID, req.AuthCode.s).name()
	if s.overStoreShare(ctx, st) {
		if _, err := s.store.Get(ctx, ck); err == nil {
			return errCodeConflict // the order of the checks: conflict, then capacity
		}
		return errStoreFull
	}
	buf := recordBufs.Get().(*[]byte)
	defer recordBufs.Put(buf)
	*buf = rec.appendTo((*buf)[:0])
	err := s.store.Insert(ctx, ck, *buf, exp)
	switch {
	case err == nil:
		s.countCode(ctx, st, exp)
		return nil
	case errors.Is(err, store.ErrExists):
		return errCodeConflict
	case errors.Is(err, store.ErrFull):
		return errFull
	default:
		return errPersist
	}
}

// validateRegister checks every field of req against the rules of docs/api.md. It
// returns the invalid fields in the order of that table, and whether the
// redirect_uri host is one of st's domains (meaningful only when the
// redirect_uri itself is valid).
func (s *server) validateRegister(st *StoreConfig, req *registerRequest) (fields []fieldError, redirectOK bool) {
	check := func(name string, f *jsonString, required bool, rule func(string) string) {
		msg := f.bad
		switch {
		case msg != "":
		case !f.set || f.s == "":
			if required { // "" is as absent: every required field has a minimum of 1 character
				msg = "is required"
			}
		case !f.plain && hasControl(f.s):
			msg = "must not contain control characters"
		default:
			msg = rule(f.s)
		}
		if msg != "" {
			fields = append(fields, fieldError{Field: name, Message: msg})
		}
	}
	check("auth_code", &req.AuthCode, true, func(v string) string {
		if len(v) < minCodeLen || len(v) > maxCodeLen || !isUnreserved(v) {
			return "must be 16 to 255 characters of A-Z a-z 0-9 - . _ ~"
		}
		return ""
	})
	check("redirect_uri", &req.RedirectURI, true, func(v string) string {
		host, msg := s.checkRedirectURI(v)
		if msg == "" {
			redirectOK = st.AllowsHost(host)
		}
		return msg
	})
	check("client_reference_id", &req.ClientReferenceID, true, max255Chars)
	check("code_challenge", &req.CodeChallenge, true, func(v string) string {
		if !isCodeChallenge(v) {
			return "must be exactly 43 characters of base64url (an S256 challenge)"
		}
		return ""
	})
	check("state", &req.State, true, max1024Chars)
	check("first_name", &req.FirstName, false, max255Chars)
	check("last_name", &req.LastName, false, max255Chars)
	check("language", &req.Language, false, func(v string) string {
		if len(v) > 10 || !isLanguageTag(v) {
			return "must be a language tag such as en or pt-BR, at most 10 characters"
		}
		return ""
	})
	check("currency", &req.Currency, false, isCurrency)
	check("country", &req.Country, false, isCountry)
	check("timezone", &req.Timezone, false, func(v string) string {
		if utf8.RuneCountInString(v) > 64 || !s.knownZone(v) {
			return "must be an IANA time zone such as Europe/Berlin, at most 64 characters"
		}
		return ""
	})
	return fields, redirectOK
}

// The field rules, built once: building them per request cost a
// fmt.Sprintf and a closure each, a fifth of the register handler's
// allocations.
var (
	max255Chars  = maxChars(255)
	max1024Chars = maxChars(1024)
	isCurrency   = upperLetters(3, "must be an ISO 4217 code: 3 upper-case letters")
	isCountry    = upperLetters(2, "must be an ISO 3166-1 alpha-2 code: 2 upper-case letters")
)

func maxChars(n int) func(string) string {
	msg := fmt.Sprintf("is longer than %d characters", n)
	return func(v string) string {
		if utf8.RuneCountInString(v) > n {
			return msg
		}
		return ""
	}
}

func upperLetters(n int, msg string) func(string) string {
	return func(v string) string {
		if len(v) != n {
			return msg
		}
		for i := 0; i < len(v); i++ {
			if v[i] < 'A' || v[i] > 'Z' {
				return msg
			}
		}
		return ""
	}
}

// hasControl reports whether s holds a C0 or C1 control character or DEL.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0 {
			return true
		}
	}
	return false
}

// isLanguageTag reports whether s looks like a BCP 47 tag: a primary
// language of 2 or 3 letters, then subtags of 1 to 8 letters or digits.
func isLanguageTag(s string) bool {
	for i := 0; ; i++ { // walks the subtags without allocating a slice of them
		sub, rest, more := strings.Cut(s, "-")
		if i == 0 && (len(sub) < 2 || len(sub) > 3) || len(sub) < 1 || len(sub) > 8 {
			return false
		}
		for j := 0; j < len(sub); j++ {
			c := sub[j] | 0x20
			if !('a' <= c && c <= 'z' || i > 0 && '0' <= sub[j] && sub[j] <= '9') {
				return false
			}
		}
		if !more {
			return true
		}
		s = rest
	}
}

// knownZone reports whether name is a zone of the IANA database (isZone).
// Loading a zone parses the database, so the names found are remembered;
// only real zone names are, so the cache is bounded by the database.
func (s *server) knownZone(name string) bool {
	if _, ok := s.zones.Load(name); ok {
		return true
	}
	if name == "Local" || strings.HasPrefix(name, "/") {
		return false
	}
	if !isZone(name) {
		return false
	}
	s.zones.Store(name, true)
	return true
}

// checkRedirectURI checks that v is an absolute https URL (http for
// localhost when insecure URLs are allowed) that cannot be read two ways:
// no userinfo, backslash, fragment, opaque form, trailing dot, non-ASCII or
// percent-encoded host. It returns the lower-cased host, or why v is
// invalid.
func (s *server) checkRedirectURI(v string) (host, msg string) {
	const invalid = "must be an absolute https URL without userinfo or fragment, at most 2048 characters"
	if len(v) > 2048 && utf8.RuneCountInString(v) > 2048 || strings.ContainsAny(v, "\\# \t") {
		return "", invalid
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return "", invalid // also the opaque form https:host
	}
	scheme = strings.ToLower(scheme)
	authority := rest
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority = rest[:i]
	}
	host = authority
	if h, port, ok := strings.Cut(authority, ":"); ok {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return "", invalid
		}
		host = h
	}
	// config.IsHostname refuses userinfo (@), percent-encoding, non-ASCII, IPv6
	// literals and empty or trailing-dot labels in one go.
	if !config.IsHostname(host) {
		return "", invalid
	}
	host = strings.ToLower(host)
	switch {
	case scheme == "https":
	case scheme == "http" && s.cfg.Webhooks.AllowInsecureURLs && (host == "localhost" || host == "127.0.0.1"):
	default:
		return "", invalid
	}
	// The rest is a path and query: every % must start an escape.
	for i := len(scheme) + 3 + len(authority); i < len(v); i++ {
		if v[i] == '%' && (i+2 >= len(v) || !config.IsHex(v[i+1]) || !config.IsHex(v[i+2])) {
			return "", invalid
		}
	}
	return host, ""
}

// configWarnings says what in a valid configuration cannot work, for both
// builds to log at start-up: a store whose own link flow sends the game
// app a callback URL that registering would refuse, and a store whose
// configuration file gives other settings than the stored ones
// (seedSettings).
func (s *server) configWarnings() []string {
	var ws []string
	if s.cfg.Webhooks.AllowInsecureURLs {
		ws = append(ws, "allow_insecure_urls is on: http:// and private addresses are accepted; for development only")
	}
	ws = append(ws, s.seedWarnings...)
	if s.cfg.PublicBaseURL == "" {
		ws = append(ws, "public_base_url is not set, and the service does not listen on a loopback address: the browser flow is off (…/auth/link and …/auth/callback answer 404 not_configured, and the drop-in button stays hidden) until public_base_url is set to the https:// address browsers reach this service at")
	}
	for _, st := range s.cfg.Stores {
		if len(st.RedirectDomains) == 0 {
			ws = append(ws, fmt.Sprintf("store %s: redirect_domains is empty: every registration answers 400 redirect_uri_not_allowed; add the hosts of the webshop's callback URLs (public_base_url's host for the service's own browser flow)", st.ID))
		}
		if s.cfg.PublicBaseURL == "" {
			continue // no browser flow of the service's own (said above)
		}
		game := st.GameAuthorizeURL
		if v, err := s.settingsOf(context.Background(), st); err == nil {
			game = v.GameAuthorizeURL
		}
		if game == "" {
			continue // no link flow
		}
		cb := s.callbackURL(nil, st)
		switch host, msg := s.checkRedirectURI(cb); {
		case msg != "":
			ws = append(ws, fmt.Sprintf("store %s: its link flow cannot complete: registering its callback URL %s answers 422 (redirect_uri %s); public_base_url must be https", st.ID, cb, msg))
		case !st.AllowsHost(host):
			ws = append(ws, fmt.Sprintf("store %s: its link flow cannot complete: registering its callback URL %s answers 400 redirect_uri_not_allowed; add %s to its redirect_domains", st.ID, cb, host))
		}
	}
	return ws
}
