package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"deeplink/internal/config"
	"deeplink/internal/store"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxBody is the largest request body any endpoint reads (API.md §3).
const maxBody = 64 << 10

// The length of an auth code, in characters (API.md §4.1).
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

// authorized reports whether the request carries one of st's API keys. Every
// key is compared, in constant time, so timing tells nothing of which.
func authorized(st *StoreConfig, r *http.Request) bool {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	keys := st.KeyHashes()
	ok := 0
	for i := range keys {
		ok |= subtle.ConstantTimeCompare(sum[:], keys[i][:])
	}
	return ok == 1
}

// handleRegister is POST /stores/{store_id}/auth/auth-code (API.md §4.1),
// behind serveStore. Checks run in the order of API.md §3: store, the
// key-guessing guard (429) and the key (serveStore), media type, shutting
// down (503), size, JSON, fields (every bad one at once), redirect host,
// conflict, capacity.
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
	buf := recordBufs.Get().(*[]byte)
	defer recordBufs.Put(buf)
	*buf = rec.appendTo((*buf)[:0])
	err := s.store.Insert(ctx, codeKey(st.ID, req.AuthCode.s).name(), *buf, exp)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrExists):
		return errCodeConflict
	case errors.Is(err, store.ErrFull):
		return errFull
	default:
		return errPersist
	}
}

// validateRegister checks every field of req against API.md §4.1. It
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

// knownZone reports whether name is a zone of the IANA database (bundled
// with the binary through time/tzdata). Loading a zone parses the database,
// so the names found are remembered; only real zone names are, so the
// cache is bounded by the database.
func (s *server) knownZone(name string) bool {
	if _, ok := s.zones.Load(name); ok {
		return true
	}
	if name == "Local" || strings.HasPrefix(name, "/") {
		return false
	}
	if _, err := time.LoadLocation(name); err != nil {
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
// app a callback URL that registering would refuse.
func (s *server) configWarnings() []string {
	var ws []string
	if s.cfg.Webhooks.AllowInsecureURLs {
		ws = append(ws, "allow_insecure_urls is on: http:// and private addresses are accepted; for development only")
	}
	for _, st := range s.cfg.Stores {
		if st.GameAuthorizeURL == "" {
			continue // no link flow
		}
		cb := s.callbackURL(st)
		switch host, msg := s.checkRedirectURI(cb); {
		case msg != "":
			ws = append(ws, fmt.Sprintf("store %s: its link flow cannot complete: registering its callback URL %s answers 422 (redirect_uri %s); public_base_url must be https", st.ID, cb, msg))
		case !st.AllowsHost(host):
			ws = append(ws, fmt.Sprintf("store %s: its link flow cannot complete: registering its callback URL %s answers 400 redirect_uri_not_allowed; add %s to its redirect_domains", st.ID, cb, host))
		}
	}
	return ws
}

// tokenError is the OAuth error body of the token endpoint (RFC 6749 §5.2).
type tokenError struct {
	status      int
	retryAfter  int    // seconds; sent as Retry-After when positive (every 503, API.md §3)
	Err         string `json:"error"`
	Description string `json:"error_description"`
}

func (e *tokenError) Error() string { return e.Err + ": " + e.Description }

func invalidGrant(why string) *tokenError {
	return &tokenError{status: http.StatusBadRequest, Err: "invalid_grant", Description: why}
}

func invalidRequest(why string) *tokenError {
	return &tokenError{status: http.StatusBadRequest, Err: "invalid_request", Description: why}
}

// tokenResponse is the success body of the token endpoint.
type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
	Player      Player `json:"player"`
}

// handleToken is POST /stores/{store_id}/auth/token (API.md §4.2), the
// webshop's code exchange.
func (s *server) handleToken(w http.ResponseWriter, r *http.Request) {
	s.allowCORS(w, r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	resp, terr := s.token(r)
	if terr != nil {
		if terr.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(terr.retryAfter))
		}
		writeJSON(w, terr.status, terr)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *server) token(r *http.Request) (*tokenResponse, *tokenError) {
	if s.draining.Load() {
		return nil, &tokenError{status: http.StatusServiceUnavailable, Err: "temporarily_unavailable", Description: "the service is shutting down; retry shortly", retryAfter: 2}
	}
	p, terr := readTokenParams(r)
	if terr != nil {
		return nil, terr
	}
	switch {
	case p.GrantType == "":
		return nil, invalidRequest("grant_type is required")
	case p.GrantType != "authorization_code":
		return nil, &tokenError{status: http.StatusBadRequest, Err: "unsupported_grant_type", Description: "only authorization_code is supported"}
	case p.Code == "":
		return nil, invalidRequest("code is required")
	// Checked before the code is looked at: a request lacking one is
	// malformed, not an attempt, so it uses nothing up, and its answer is
	// the same whether the code is live or not.
	case p.RedirectURI == "":
		return nil, invalidRequest("redirect_uri is required")
	case p.CodeVerifier == "":
		return nil, invalidRequest("code_verifier is required")
	}
	st := s.cfg.Store(r.PathValue("store_id"))
	if st == nil {
		return nil, invalidGrant("no store with that id")
	}
	return s.redeem(r.Context(), st, p.Code, p.RedirectURI, p.CodeVerifier)
}

// tokenParams are the parameters of a token request.
type tokenParams struct {
	GrantType    string `json:"grant_type"`
	Code         string `json:"code"`
	RedirectURI  string `json:"redirect_uri"`
	CodeVerifier string `json:"code_verifier"`
	// client_id is accepted and ignored: the webshop is a public client.
}

// tokenParam is one parameter of a token request, by name.
type tokenParam struct {
	name string
	dst  *string
}

// params are p's parameters, by name.
func (p *tokenParams) params() [4]tokenParam {
	return [...]tokenParam{{"grant_type", &p.GrantType}, {"code", &p.Code}, {"redirect_uri", &p.RedirectURI}, {"code_verifier", &p.CodeVerifier}}
}

// readTokenParams reads a form-encoded body, or a JSON one.
func readTokenParams(r *http.Request) (p tokenParams, terr *tokenError) {
	body, buf, err := readBody(r)
	if err != nil {
		e := asAPIError(err)
		return p, invalidRequest(e.Message) // the token endpoint's errors are all 400 (API.md §4.2)
	}
	defer bodyPool.Put(buf)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/x-www-form-urlencoded":
		q, err := url.ParseQuery(string(body))
		if err != nil {
			return p, invalidRequest("the body is not a valid form")
		}
		for _, f := range p.params() {
			if len(q[f.name]) > 1 {
				return p, invalidRequest(f.name + " is repeated")
			}
			*f.dst = q.Get(f.name)
		}

	case "application/json":
		if terr := readTokenJSON(body, &p); terr != nil {
			return p, terr
		}
	default:
		return p, invalidRequest("Content-Type must be application/x-www-form-urlencoded or application/json")
	}
	return p, nil
}

// tokenJSON is a token request as a JSON body.
type tokenJSON struct {
	GrantType    jsonString `json:"grant_type"`
	Code         jsonString `json:"code"`
	RedirectURI  jsonString `json:"redirect_uri"`
	CodeVerifier jsonString `json:"code_verifier"`
	ClientID     jsonString `json:"client_id"` // must be a string when given, and is ignored
}

// readTokenJSON reads a JSON token request into p, by the rules every JSON
// body is read by (decodeObject): names match exactly, as in a form
// ("Code" is not code), and none is given twice. Each parameter is a
// string of valid Unicode, or null or absent. A request refused here is
// no attempt and uses no code up, where encoding/json alone would have let
// the last of two codes, or a "CODE", redeem.
func readTokenJSON(body []byte, p *tokenParams) *tokenError {
	var req tokenJSON
	if err := decodeObject(body, &req); err != nil {
		return invalidRequest(asAPIError(err).Message)
	}
	for _, f := range [...]struct {
		name string
		v    *jsonString
		dst  *string
	}{
		{"grant_type", &req.GrantType, &p.GrantType},
		{"code", &req.Code, &p.Code},
		{"redirect_uri", &req.RedirectURI, &p.RedirectURI},
		{"code_verifier", &req.CodeVerifier, &p.CodeVerifier},
		{"client_id", &req.ClientID, nil},
	} {
		if f.v.bad != "" {
			return invalidRequest(f.name + " " + f.v.bad)
		}
		if f.dst != nil {
			*f.dst = f.v.s
		}
	}
	return nil
}

// unknownCode is the token endpoint's one answer for a code it does not
// hold or that is used up: which of these it was is not told.
const unknownCode = "the code is unknown, expired, already used, or for another store"

// redeemGrace is how long a redeemed code's marker lives at least, past
// its TTL if need be: far longer than a redemption takes, pauses included.
const redeemGrace = time.Minute

// redeem exchanges the code of st for an access token. Whatever the
// outcome, the code is used up: the compare-and-swap of the code's record
// to a redeemed mark is the one atomic step that decides which of
// concurrent redemptions wins. Redeeming an already redeemed code revokes
// the token the first redemption issued. Every change is durable before
// the store call that makes it returns, and each is ordered so that a
// crash between two of them loses nothing answered: a code used up, a
// token issued, a revocation.
func (s *server) redeem(ctx context.Context, st *StoreConfig, code, redirectURI, verifier string) (*tokenResponse, *tokenError) {
	if len(code) > 255 {
		return nil, invalidGrant(unknownCode)
	}
	ck := codeKey(st.ID, code).name()
	rk := replayKey(st.ID, code).name()
	token := randomToken()
	tk := tokenKey(token)
	marker := redeemedValue(tk)
	old, terr := s.takeCode(ctx, ck, rk, marker)
	if terr != nil {
		return nil, terr
	}
	rec, terr := checkExchange(old, redirectURI, verifier)
	if terr != nil {
		return nil, terr
	}
	// The winner's marker outlives its redemption (redeemGrace): the last
	// check below must not find it expired. Only the winner's: attempts
	// after it must not keep the code's key taken.
	switch err := s.store.Extend(ctx, ck, s.now().Add(redeemGrace)); {
	case errors.Is(err, store.ErrNotFound):
		return nil, invalidGrant(unknownCode) // it expired in between
	case err != nil:
		return nil, errRedeemUnavailable
	}
	// The token is named under the replay key for as long as it lives,
	// before it exists: a sign-in is answered only once a later replay
	// can revoke it. (The same code string may have signed someone in
	// before, registered again after its TTL: the newer token wins.)
	sessionExp := s.now().Add(s.cfg.SessionTTL.D())
	err := s.store.Put(ctx, rk, marker, sessionExp)
	sess := sessionRecord{StoreID: st.ID, Player: rec.Player}
	if err == nil {
		err = s.store.Insert(ctx, tk.name(), sess.encode(), sessionExp)
	}
	if err != nil {
		s.store.Delete(ctx, rk) // it names no token: do not hold it for session_ttl
		return nil, errRedeemUnavailable
	}
	// A replay that came in between, at the code's key or the replay key,
	// marked it replayed and deleted a token not yet stored; if either
	// mark is no longer ours, revoke the token now. It is still the one
	// token this code issued, so it is answered, exactly as if the replay
	// had come a moment later.
	cur, err1 := s.store.Get(ctx, ck)
	replayed, err2 := s.store.Get(ctx, rk)
	if err1 != nil || !bytes.Equal(cur, marker) || err2 == nil && !bytes.Equal(replayed, marker) {
		if err := s.store.Delete(ctx, tk.name()); err != nil {
			return nil, errRedeemUnavailable
		}
	}
	return &tokenResponse{
		AccessToken: token,
		TokenType:   "Bearer",
		ExpiresIn:   int64(s.cfg.SessionTTL.D() / time.Second),
		Player:      rec.Player,
	}, nil
}

// takeCode swaps the registered code at ck for marker and returns the
// code's record; the code's expiry is kept. A code already redeemed is
// a replay: the token its mark names is revoked, at ck or, once the
// code's own entry has expired, at the replay key rk, and the answer is
// invalid_grant. A concurrent change of ck makes it look again.
func (s *server) takeCode(ctx context.Context, ck, rk string, marker []byte) ([]byte, *tokenError) {
	for range 4 {
		old, err := s.store.Get(ctx, ck)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// Unknown, or past its TTL: if it signed someone in, this is
			// a replay all the same, and revokes what it issued.
			return nil, s.replay(ctx, rk)
		case err != nil:
			return nil, errRedeemUnavailable
		}
		if _, _, ok := decodeMarker(old); ok {
			if terr := s.revoke(ctx, ck, old); terr != errConflictAgain {
				return nil, terr
			}
			continue
		}
		switch err := s.store.CompareAndSwap(ctx, ck, old, marker, time.Time{}); {
		case err == nil:
			return old, nil
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			continue // another attempt changed it: look again
		default:
			return nil, errRedeemUnavailable
		}
	}
	return nil, invalidGrant(unknownCode) // others keep changing it: they used it up
}

// replay revokes the token that the replay key rk names, if any.
func (s *server) replay(ctx context.Context, rk string) *tokenError {
	for range 4 {
		v, err := s.store.Get(ctx, rk)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return invalidGrant(unknownCode)
		case err != nil:
			return errRedeemUnavailable
		}
		if terr := s.revoke(ctx, rk, v); terr != errConflictAgain {
			return terr
		}
	}
	return invalidGrant(unknownCode)
}

// errConflictAgain is revoke's answer when key changed under it.
var errConflictAgain = &tokenError{Err: "conflict"}

// revoke handles a replay that found mark (redeemed or replayed) at key:
// the key is marked replayed first, naming the token still, then the
// token is deleted. A crash between the two leaves the replayed mark, and
// the next replay deletes the token. It answers invalid_grant, or
// errConflictAgain when key changed meanwhile.
func (s *server) revoke(ctx context.Context, key string, mark []byte) *tokenError {
	tok, replayed, ok := decodeMarker(mark)
	if !ok {
		return invalidGrant(unknownCode)
	}
	if !replayed {
		switch err := s.store.CompareAndSwap(ctx, key, mark, replayedValue(tok), time.Time{}); {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			return errConflictAgain
		case err != nil:
			return errRedeemUnavailable
		}
	}
	if err := s.store.Delete(ctx, tok.name()); err != nil {
		return errRedeemUnavailable
	}
	return invalidGrant(unknownCode)
}

// errRedeemUnavailable answers a redemption the store could not keep.
// The code is used up all the same when the swap that took it was kept.
var errRedeemUnavailable = &tokenError{status: http.StatusServiceUnavailable, Err: "temporarily_unavailable", Description: "cannot store the session; start the sign-in again", retryAfter: 5}

// checkExchange decodes the value a redemption swapped out of a code's
// key and checks the request against it: the code's record, or the error
// to answer.
func checkExchange(old []byte, redirectURI, verifier string) (codeRecord, *tokenError) {
	rec, ok := decodeCode(old)
	switch {
	case !ok:
		return rec, invalidGrant(unknownCode)
	case redirectURI != rec.RedirectURI:
		return rec, invalidGrant("redirect_uri differs from the one the code was registered with")
	case !isCodeVerifier(verifier) || !verifyS256(verifier, rec.CodeChallenge):
		return rec, invalidGrant("code_verifier does not match the code_challenge")
	}
	return rec, nil
}

// allowCORS answers for browsers on the store's redirect domains, so a
// webshop page may call the token endpoint itself.
func (s *server) allowCORS(w http.ResponseWriter, r *http.Request) bool {
	w.Header().Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	st := s.cfg.Store(r.PathValue("store_id"))
	if origin == "" || st == nil {
		return false
	}
	// An origin is scheme://host[:port] and nothing else (RFC 6454 §6.2):
	// what parses to more, such as https://evil@shop.example.com, is not
	// one a browser sends.
	u, err := url.Parse(origin)
	if err != nil || origin != u.Scheme+"://"+u.Host || !(u.Scheme == "https" || u.Scheme == "http" && s.cfg.Webhooks.AllowInsecureURLs) || !st.AllowsHost(strings.ToLower(u.Hostname())) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "POST")
	h.Set("Access-Control-Allow-Headers", "Content-Type")
	h.Set("Access-Control-Max-Age", "600")
	return true
}

// handleTokenPreflight answers the CORS preflight of the token endpoint.
func (s *server) handleTokenPreflight(w http.ResponseWriter, r *http.Request) {
	if s.storeFor(w, r) == nil {
		return
	}
	if !s.allowCORS(w, r) {
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "cors_origin_not_allowed", Message: "the Origin is not on a redirect domain of this store"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionCookie carries the access token in the browser flow.
const sessionCookie = "dl_session"

// handleMe is GET /stores/{store_id}/auth/me (API.md §4.3).
func (s *server) handleMe(w http.ResponseWriter, r *http.Request) {
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	// The scheme is case-insensitive (RFC 7235 §2.1), and one or more
	// spaces follow it (RFC 6750 §2.1: "Bearer" 1*SP b64token).
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	ok = ok && strings.EqualFold(scheme, "Bearer")
	token = strings.TrimLeft(token, " ")
	if !ok {
		if c, err := r.Cookie(sessionCookie); err == nil {
			token, ok = c.Value, true
		}
	}
	var sess sessionRecord
	if ok && token != "" {
		v, err := s.store.Get(r.Context(), tokenKey(token).name())
		switch {
		case err == nil:
			sess, ok = decodeSession(v)
		case errors.Is(err, store.ErrNotFound):
			ok = false
		default:
			writeError(w, errPersist)
			return
		}
	}
	if !ok || token == "" || sess.StoreID != st.ID {
		challenge := `Bearer error="invalid_token"`
		if _, err := r.Cookie(sessionCookie); err != nil && r.Header.Get("Authorization") == "" {
			challenge = "Bearer" // no credentials sent: no error code (RFC 6750 §3.1)
		}
		w.Header().Set("WWW-Authenticate", challenge)
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "the access token is missing, unknown, expired or for another store"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"player": sess.Player}})
}

// linkState is what the link endpoint binds to the browser, in a signed
// cookie, for the callback to check.
type linkState struct {
	Verifier string `json:"v"`
	State    string `json:"s"`
	ReturnTo string `json:"r"`
	StoreID  string `json:"i"`
	Expires  int64  `json:"e"`
}

const linkCookie = "dl_link"

// handleLink is GET /stores/{store_id}/auth/link (API.md §4.4): it starts
// the deep-link flow by sending the browser to the game app.
func (s *server) handleLink(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		// The GET route takes HEAD too, but a HEAD here would set a new
		// link cookie in place of the one of a sign-in under way.
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	if st.GameAuthorizeURL == "" {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "this store has no game_authorize_url configured"})
		return
	}
	ls := linkState{
		Verifier: newVerifier(),
		State:    randomToken(),
		ReturnTo: safeReturnTo(r.URL.Query().Get("return_to")),
		StoreID:  st.ID,
		Expires:  time.Now().Add(s.linkTTL()).Unix(),
	}
	value := s.sign(ls)
	if len(linkCookie)+len(value) > maxCookieSize {
		// A return path too long for the cookie, which browsers would
		// drop, and the sign-in with it: back to the start page instead.
		ls.ReturnTo = "/"
		value = s.sign(ls)
	}
	http.SetCookie(w, &http.Cookie{
		Name:     linkCookie,
		Value:    value,
		Path:     s.linkCookiePath(st),
		MaxAge:   int(s.linkTTL() / time.Second),
		HttpOnly: true,
		Secure:   true,
		SameSite: http.SameSiteLaxMode,
	})
	target, _ := url.Parse(st.GameAuthorizeURL) // validated at start-up
	q := target.Query()
	q.Set("redirect_uri", s.callbackURL(st))
	q.Set("state", ls.State)
	q.Set("code_challenge", s256(ls.Verifier))
	q.Set("code_challenge_method", "S256")
	q.Set("store_id", st.ID)
	target.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target.String(), http.StatusFound)
}

// maxCookieSize is the most a cookie's name and value may take together:
// browsers drop a larger one (RFC 6265 §6.1 asks them to take at least
// 4096 bytes, and Chrome and Firefox take no more).
const maxCookieSize = 4096

// linkTTL is how long a started link flow may take: the code's own life
// plus time for the player to find the app.
func (s *server) linkTTL() time.Duration { return s.cfg.AuthCodeTTL.D() + 5*time.Minute }

func (s *server) callbackURL(st *StoreConfig) string {
	return s.cfg.PublicBaseURL + "/stores/" + st.ID + "/auth/callback"
}

// linkCookiePath is the Path of the link cookie: the callback's directory
// as the browser sees it, so under public_base_url's own path when it has
// one (the service behind a proxy that strips it).
func (s *server) linkCookiePath(st *StoreConfig) string {
	u, _ := url.Parse(s.callbackURL(st)) // public_base_url is validated at start-up
	return strings.TrimSuffix(u.EscapedPath(), "callback")
}

// safeReturnTo returns p when it is a path on this site, and "/" otherwise:
// never another origin (//host, /\host, scheme:).
func safeReturnTo(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\\") || hasControl(p) {
		return "/"
	}
	if u, err := url.Parse(p); err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return p
}

// sign returns ls as a cookie value: base64url(JSON) "." base64url(HMAC).
func (s *server) sign(ls linkState) string {
	b, _ := json.Marshal(ls)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

// Why verify refuses a link cookie, as the callback's page says it.
const (
	linkForged  = "This browser's sign-in attempt could not be read: its cookie was changed, or was not made by this service."
	linkExpired = "This sign-in attempt has expired."
)

// verify returns the link state of a cookie value signed by sign, or why
// it refuses the value: linkForged if the signature does not hold,
// linkExpired if it does but the state has expired at now.
func (s *server) verify(v string, now time.Time) (ls linkState, why string) {
	payload, sig, found := strings.Cut(v, ".")
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if !found || err != nil || !hmac.Equal(mac, s.mac(payload)) {
		return ls, linkForged
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &ls) != nil {
		return ls, linkForged // signed, but not by sign: cannot happen
	}
	if now.Unix() >= ls.Expires {
		return ls, linkExpired
	}
	return ls, ""
}

func (s *server) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.cookieKey)
	m.Write([]byte("link\x00" + payload))
	return m.Sum(nil)
}

// handleCallback is GET /stores/{store_id}/auth/callback (API.md §4.4):
// where the game app sends the browser back with code and state.
func (s *server) handleCallback(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead {
		// The GET route takes HEAD too, but a HEAD here would redeem the
		// code: a link checker's HEAD would spend the player's sign-in.
		methodNotAllowed(w, r, http.MethodGet)
		return
	}
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	q := r.URL.Query()
	c, err := r.Cookie(linkCookie)
	if err != nil {
		callbackFailed(w, "This sign-in was not started in this browser, or it was already completed. Go back to the shop and choose “Link to game” again.")
		return
	}
	// A cookie that can never complete a sign-in is cleared; one whose
	// state a request does not carry is left for the request that does:
	// any page can send the browser here, and must not end a sign-in
	// under way.
	clearLink := func() {
		http.SetCookie(w, &http.Cookie{Name: linkCookie, Path: s.linkCookiePath(st), MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	}
	ls, why := s.verify(c.Value, time.Now())
	switch {
	case why != "":
		clearLink()
		callbackFailed(w, why+" Go back to the shop and choose “Link to game” again.")
		return
	case ls.StoreID != st.ID:
		clearLink()
		callbackFailed(w, "This browser's sign-in attempt was started in another store. Go back to the shop and choose “Link to game” again.")
		return
	case subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(ls.State)) != 1:
		callbackFailed(w, "The state returned by the game app does not match this browser's sign-in attempt.")
		return
	}
	clearLink() // from here on, whatever happens, this link attempt is over
	switch {
	case q.Get("error") != "":
		callbackFailed(w, "The game app did not complete the sign-in ("+q.Get("error")+").")
		return
	case q.Get("code") == "":
		callbackFailed(w, "The game app returned no code.")
		return
	}
	resp, terr := s.redeem(r.Context(), st, q.Get("code"), s.callbackURL(st), ls.Verifier)
	if terr != nil {
		callbackFailed(w, "The code from the game app could not be used: "+terr.Description+".")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    resp.AccessToken,
		Path:     "/",
		MaxAge:   int(resp.ExpiresIn),
		HttpOnly: true,
		Secure:   true,
		SameSite: http.SameSiteLaxMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, ls.ReturnTo, http.StatusFound)
}

var callbackPage = template.Must(template.New("").Parse(`<!doctype html>
<meta charset="utf-8"><title>Sign-in failed</title>
<h1>Sign-in failed</h1>
<p>{{.}}</p>
`))

// callbackFailed answers the browser's callback with a 400 page saying
// why.
func callbackFailed(w http.ResponseWriter, why string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadRequest)
	callbackPage.Execute(w, why)
}
