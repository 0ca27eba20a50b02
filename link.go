package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

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

// handleLink is GET /stores/{store_id}/auth/link (docs/api.md): it starts
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
	set, err := s.settingsOf(r.Context(), st)
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	if set.GameAuthorizeURL == "" {
		notConfigured(w, r, "this store has no Game Authorize URL: sign-in with the game is not set up")
		return
	}
	if s.publicBase(r) == "" {
		notConfigured(w, r, noPublicBase)
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
		Path:     s.linkCookiePath(r, st),
		MaxAge:   int(s.linkTTL() / time.Second),
		HttpOnly: true,
		Secure:   true,
		SameSite: http.SameSiteLaxMode,
	})
	game := set.GameAuthorizeURL
	if b := s.demoBase(r); b != "" {
		game = b + strings.TrimPrefix(game, s.cfg.PublicBaseURL)
	}
	target, err := url.Parse(game) // validated when set (seedSettings, the settings' PATCH)
	if err != nil {
		s.log.Error("store settings: the stored game_authorize_url does not parse; answering 503", "store", st.ID, "err", err)
		writeError(w, errStoreDown)
		return
	}
	q := target.Query()
	q.Set("redirect_uri", s.callbackURL(r, st))
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

// publicBase is where browsers reach the service: public_base_url, or
// where the demo's browser reached it (demoBase); "" when public_base_url
// is not set, and the browser flow is off. r may be nil.
func (s *server) publicBase(r *http.Request) string {
	if b := s.demoBase(r); b != "" {
		return b
	}
	return s.cfg.PublicBaseURL
}

// callbackURL is where the game app sends r's browser back to, under
// publicBase. r may be nil.
func (s *server) callbackURL(r *http.Request, st *StoreConfig) string {
	return s.publicBase(r) + "/stores/" + st.ID + "/auth/callback"
}

// noPublicBase is why the browser flow is off while public_base_url is
// not set.
const noPublicBase = "public_base_url is not set: the service does not know the address browsers reach it at"

// linkCookiePath is the Path of the link cookie: the callback's directory
// as the browser sees it, so under public_base_url's own path when it has
// one (the service behind a proxy that strips it).
func (s *server) linkCookiePath(r *http.Request, st *StoreConfig) string {
	u, _ := url.Parse(s.callbackURL(r, st)) // public_base_url is validated at start-up
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

// handleCallback is GET /stores/{store_id}/auth/callback (docs/api.md):
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
	if s.publicBase(r) == "" {
		notConfigured(w, r, noPublicBase)
		return
	}
	q := r.URL.Query()
	c, err := r.Cookie(linkCookie)
	if err != nil {
		callbackFailed(w, "/", "This sign-in was not started in this browser, or it was already completed. Go back to the shop and choose “Link to game” again.")
		return
	}
	// A cookie that can never complete a sign-in is cleared; one whose
	// state a request does not carry is left for the request that does:
	// any page can send the browser here, and must not end a sign-in
	// under way.
	clearLink := func() {
		http.SetCookie(w, &http.Cookie{Name: linkCookie, Path: s.linkCookiePath(r, st), MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	}
	ls, why := s.verify(c.Value, time.Now())
	switch {
	case why != "":
		clearLink()
		callbackFailed(w, "/", why+" Go back to the shop and choose “Link to game” again.")
		return
	case ls.StoreID != st.ID:
		clearLink()
		callbackFailed(w, "/", "This browser's sign-in attempt was started in another store. Go back to the shop and choose “Link to game” again.")
		return
	case subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(ls.State)) != 1:
		callbackFailed(w, ls.ReturnTo, "The state returned by the game app does not match this browser's sign-in attempt.")
		return
	}
	clearLink() // from here on, whatever happens, this link attempt is over
	switch {
	case q.Get("error") != "":
		callbackFailedWith(w, http.StatusBadRequest, gameError(q.Get("error"), ls.ReturnTo))
		return
	case q.Get("code") == "":
		callbackFailed(w, ls.ReturnTo, "The game app returned no code.")
		return
	}
	resp, terr := s.guardedRedeem(r, st.ID, tokenParams{Code: q.Get("code"), RedirectURI: s.callbackURL(r, st), CodeVerifier: ls.Verifier})
	if terr != nil {
		if terr.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(terr.retryAfter))
		}
		callbackFailedWith(w, terr.status, authPage{Title: "Sign-in failed", Message: "The code from the game app could not be used: " + terr.Description + ".", Back: ls.ReturnTo})
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

// gameError is what the callback's page says of an error the game app
// sent back (error=…, RFC 6749 §4.1.2.1), with the code in small print.
func gameError(code string, back string) authPage {
	if len(code) > 64 {
		code = code[:64] + "…"
	}
	if code == "access_denied" { // the player chose Cancel in the game app
		return authPage{Title: "Sign-in cancelled", Message: "You cancelled the sign-in in the game. Nothing has changed; choose “Link to game” in the shop whenever you want to sign in.", Code: code, Back: back, Off: true}
	}
	return authPage{Title: "Sign-in failed", Message: "The game app did not complete the sign-in. Go back to the shop and choose “Link to game” again.", Code: code, Back: back}
}

// callbackFailed answers the browser's callback with a 400 page saying
// why, and leading back to the shop at back.
func callbackFailed(w http.ResponseWriter, back, why string) {
	callbackFailedWith(w, http.StatusBadRequest, authPage{Title: "Sign-in failed", Message: why, Back: back})
}

// callbackFailedWith answers the browser's callback with page: 503 when
// status is (the service could not store the session), and otherwise
// 400, a bad callback's, even for a redemption the address's budget held
// back (429 at the token endpoint), whose Retry-After the caller sets.
func callbackFailedWith(w http.ResponseWriter, status int, page authPage) {
	if status != http.StatusServiceUnavailable {
		status = http.StatusBadRequest
	}
	writeAuthPage(w, status, page)
}

// notConfigured answers the browser flow while it is off (a store without
// a Game Authorize URL, or public_base_url not set), why saying which:
// 404 not_configured (docs/api.md), as a page for a browser, which asks
// for one (Accept: text/html), and as the JSON error for anything else.
func notConfigured(w http.ResponseWriter, r *http.Request, why string) {
	w.Header().Set("Cache-Control", "no-store") // sign-in may be turned on at any time
	if !acceptsHTML(r) {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: "not_configured", Message: why})
		return
	}
	writeAuthPage(w, http.StatusNotFound, authPage{
		Title:   "Sign-in is not set up",
		Message: "Signing in with the game app is not set up for this store yet, so this link cannot take you to the game. You can go on shopping without it.",
		Code:    "not_configured",
		Back:    safeReturnTo(r.URL.Query().Get("return_to")),
		Off:     true,
	})
}

// acceptsHTML reports whether r's Accept lists text/html (as a browser's
// navigation does) with a q other than 0.
func acceptsHTML(r *http.Request) bool {
	for _, part := range strings.Split(strings.Join(r.Header.Values("Accept"), ","), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && mt == "text/html" {
			q, err := strconv.ParseFloat(params["q"], 64)
			return err != nil || q > 0
		}
	}
	return false
}
