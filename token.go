package main

import (
	"bytes"
	"context"
	"deeplink/internal/store"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// tokenError is the OAuth error body of the token endpoint (RFC 6749 §5.2).
type tokenError struct {
	status      int
	retryAfter  int    // seconds; sent as Retry-After when positive (every 503 carries one)
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

// handleToken is POST /stores/{store_id}/auth/token (docs/api.md), the
// webshop's code exchange.
func (s *server) handleToken(w http.ResponseWriter, r *http.Request) {
	s.allowCORS(w, r, tokenCORS)
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
	return s.guardedRedeem(r, r.PathValue("store_id"), p)
}

// guardedRedeem redeems p's code in the store named storeID for r's
// client, within the address's budget of failed redemptions
// (grantGuard): the token endpoint's and the callback's, so that neither
// is a way round the other's.
func (s *server) guardedRedeem(r *http.Request, storeID string, p tokenParams) (*tokenResponse, *tokenError) {
	// Looked up only once some address has failed, as the key guard's is.
	client := ""
	if s.grants.anyFailing() {
		client = clientAddr(r, s.cfg.Proxies())
		if terr := s.overGrantBudget(r.Context(), client, storeID, p); terr != nil {
			return nil, terr
		}
	}
	resp, terr := s.redeemIn(r.Context(), storeID, p)
	if terr != nil && terr.Err == "invalid_grant" {
		if client == "" {
			client = clientAddr(r, s.cfg.Proxies())
		}
		s.grants.failed(r.Context(), client, s.now())
	}
	return resp, terr
}

// redeemIn redeems p's code in the store named storeID.
func (s *server) redeemIn(ctx context.Context, storeID string, p tokenParams) (*tokenResponse, *tokenError) {
	st := s.cfg.Store(storeID)
	if st == nil {
		return nil, invalidGrant("no store with that id")
	}
	return s.redeem(ctx, st, p.Code, p.RedirectURI, p.CodeVerifier)
}

// overGrantBudget answers 429 rate_limited, with Retry-After, a request
// for the store named storeID from client when that address has no failed redemptions left
// (grantGuard) and the request would fail too: a redemption that would
// succeed is never held up, and neither is a replay of a redeemed code,
// which revokes what that code issued. It only reads the code: a request
// it refuses uses nothing up, so a throttled guesser cannot burn the
// codes of others at any rate either.
func (s *server) overGrantBudget(ctx context.Context, client, storeID string, p tokenParams) *tokenError {
	blocked, wait := s.grants.blocked(client, s.now)
	if !blocked {
		return nil
	}
	if st := s.cfg.Store(storeID); st != nil && len(p.Code) <= 255 {
		old, err := s.store.Get(ctx, codeKey(st.ID, p.Code).name())
		switch {
		case errors.Is(err, store.ErrNotFound):
			// A replay later than the code's own key lives: the replay
			// key still names the token it issued, to revoke.
			switch _, err := s.store.Get(ctx, replayKey(st.ID, p.Code).name()); {
			case err == nil:
				return nil
			case !errors.Is(err, store.ErrNotFound):
				return errRedeemUnavailable
			}
		case err != nil:
			return errRedeemUnavailable
		default:
			if _, _, redeemed := decodeMarker(old); redeemed {
				return nil
			}
			if _, terr := checkExchange(old, p.RedirectURI, p.CodeVerifier); terr == nil {
				return nil
			}
		}
	}
	return &tokenError{status: http.StatusTooManyRequests, Err: "rate_limited",
		Description: "too many failed redemptions from this address; retry later",
		retryAfter:  max(1, int(wait.Seconds()+0.999))}
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
		return p, invalidRequest(e.Message) // the token endpoint's errors are all 400 (OAuth's invalid_request)
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
		if len(q["client_id"]) > 1 { // ignored, but a parameter all the same (RFC 6749 §3.2)
			return p, invalidRequest("client_id is repeated")
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
	s.countSession(ctx, st, sessionExp)
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

// corsPolicy is what a page on one of a store's redirect domains may send
// to an endpoint from the browser: the token exchange and /auth/me answer
// such pages, so that a webshop can sign the player in with no backend
// of its own.
type corsPolicy struct {
	methods, headers string // Access-Control-Allow-Methods and -Headers
}

var (
	tokenCORS = corsPolicy{methods: "POST", headers: "Content-Type"}
	meCORS    = corsPolicy{methods: "GET", headers: "Authorization"}
)

// allowCORS adds p's CORS headers to the answer when r comes from an
// origin on a redirect domain of the store it names, and reports whether
// it did. Any other origin gets none, so its page cannot read the answer.
func (s *server) allowCORS(w http.ResponseWriter, r *http.Request, p corsPolicy) bool {
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
	h.Set("Access-Control-Allow-Methods", p.methods)
	h.Set("Access-Control-Allow-Headers", p.headers)
	h.Set("Access-Control-Max-Age", "600")
	return true
}

// preflight answers the CORS preflight (OPTIONS) of an endpoint with
// policy p: 204 with p's headers for an origin on the store's redirect
// domains, 403 without them for any other, 404 for an unknown store.
func (s *server) preflight(p corsPolicy) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.storeFor(w, r) == nil {
			return
		}
		if !s.allowCORS(w, r, p) {
			writeError(w, &apiError{Status: http.StatusForbidden, Code: "cors_origin_not_allowed", Message: "the Origin is not on a redirect domain of this store"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// sessionCookie carries the access token in the browser flow.
const sessionCookie = "dl_session"

// playerToken returns the access token r carries: in an Authorization
// header of the Bearer scheme, or else in the session cookie.
func playerToken(r *http.Request) (string, bool) {
	// The scheme is case-insensitive (RFC 7235 §2.1), and one or more
	// spaces follow it (RFC 6750 §2.1: "Bearer" 1*SP b64token).
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimLeft(token, " "), true
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return c.Value, true
	}
	return "", false
}

// handleMe is GET /stores/{store_id}/auth/me: the player a token signed
// in. A page on the store's redirect domains may read it, 401s included.
func (s *server) handleMe(w http.ResponseWriter, r *http.Request) {
	s.allowCORS(w, r, meCORS)
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	token, ok := playerToken(r)
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
