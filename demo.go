package main

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"deeplink/internal/store"
)

// The demo serves, next to the real API, a stand-in for the two parties
// the service sits between, so that a bare `go run .` shows the whole flow
// in a browser: a small webshop, and a game app that is always signed in
// as the same player and asks before it signs them in. Only the embedded
// demo configuration turns them on.

var demoPages = template.Must(template.ParseFS(webFiles, "web/demo/*.html"))

// demoPlayer is the player the demo's game app is signed in as.
var demoPlayer = Player{
	ClientReferenceID: "demo-player-1", FirstName: "Ada", LastName: "Lovelace",
	Language: "en", Currency: "GBP", Country: "GB", Timezone: "Europe/London",
}

func (s *server) demoRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.handleDemoShop("shop"))
	mux.HandleFunc("GET /cart", s.handleDemoShop("cart"))
	mux.HandleFunc("GET /demo/game/authorize", s.handleDemoGameAsk)
	mux.HandleFunc("POST /demo/game/authorize", s.handleDemoGame)
}

// handleDemoShop is a page of the demo webshop, showing who is signed in
// by the session cookie the callback set.
func (s *server) handleDemoShop(page string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := s.cfg.Stores[0]
		set, err := s.settingsOf(r.Context(), st)
		if err != nil {
			s.settingsFailed(w, st, err, false)
			return
		}
		data := map[string]any{"Store": set.page(st), "Page": page}
		if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
			v, err := s.store.Get(r.Context(), tokenKey(c.Value).name())
			if sess, ok := decodeSession(v); err == nil && ok && sess.StoreID == st.ID {
				data["Player"] = &sess.Player
			} else if err != nil && !errors.Is(err, store.ErrNotFound) {
				writeError(w, errPersist)
				return
			}
		}
		demoHeaders(w)
		demoPages.ExecuteTemplate(w, "home.html", data)
	}
}

// handleDemoGameAsk is the game app's screen for step 1 of the flow: the
// deep link opened it, and it asks its player before signing them in.
func (s *server) handleDemoGameAsk(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := s.cfg.Store(q.Get("store_id"))
	if st == nil || q.Get("code_challenge_method") != "S256" {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "the deep link lacks store_id or code_challenge_method=S256"})
		return
	}
	keep := map[string]string{}
	for _, k := range []string{"store_id", "redirect_uri", "state", "code_challenge", "code_challenge_method"} {
		keep[k] = q.Get(k)
	}
	// Cancel goes back to the webshop only where registering would: an
	// http(s) redirect_uri on the store's domains. Anything else (another
	// site, a javascript: URL) gets the demo's own home page.
	cancel := "/"
	if back, err := url.Parse(q.Get("redirect_uri")); err == nil && (back.Scheme == "https" || back.Scheme == "http") && back.User == nil && st.AllowsHost(back.Hostname()) {
		bq := back.Query()
		bq.Set("error", "access_denied")
		bq.Set("state", q.Get("state"))
		back.RawQuery = bq.Encode()
		cancel = back.String()
	}
	set, err := s.settingsOf(r.Context(), st)
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	demoHeaders(w)
	demoPages.ExecuteTemplate(w, "game.html", map[string]any{"Store": set.page(st), "Player": demoPlayer, "Query": keep, "Cancel": cancel})
}

// handleDemoGame plays the game app of the flow's steps 2–4 once its
// player chose Continue: it registers a fresh code for its signed-in
// player, and sends the browser back to the webshop.
func (s *server) handleDemoGame(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	st := s.cfg.Store(r.PostFormValue("store_id"))
	if st == nil || r.PostFormValue("code_challenge_method") != "S256" {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "the deep link lacks store_id or code_challenge_method=S256"})
		return
	}
	code := randomToken()
	req := registerRequest{}
	p := demoPlayer
	for _, f := range []struct {
		dst *jsonString
		v   string
	}{
		{&req.AuthCode, code},
		{&req.RedirectURI, r.PostFormValue("redirect_uri")},
		{&req.ClientReferenceID, p.ClientReferenceID},
		{&req.CodeChallenge, r.PostFormValue("code_challenge")},
		{&req.State, r.PostFormValue("state")},
		{&req.FirstName, p.FirstName},
		{&req.LastName, p.LastName},
		{&req.Language, p.Language},
		{&req.Currency, p.Currency},
		{&req.Country, p.Country},
		{&req.Timezone, p.Timezone},
	} {
		*f.dst = jsonString{s: f.v, set: f.v != ""}
	}
	if e := s.register(r.Context(), st, &req); e != nil {
		// The game app must not redirect back when registration fails.
		writeError(w, e)
		return
	}
	back, _ := url.Parse(req.RedirectURI.s) // validated by register
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", req.State.s)
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

// demoHeaders sets the headers of the demo's pages: scripts, style
// sheets and requests of this origin only (the drop-in button), no
// framing, forms posted to this origin only.
func demoHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
}

// demoBase is where the demo's browser reached it: its links and
// redirects stay on that loopback host (127.0.0.1 or localhost), whose
// cookies the browser keeps apart. "" outside the demo, or for any other
// host.
func (s *server) demoBase(r *http.Request) string {
	if !s.demo || r == nil || !plainLoopback(r) || strings.ContainsAny(r.Host, "/\\@") {
		return ""
	}
	return "http://" + r.Host
}

// printDemoBanner prints the demo store's id and key, and curl lines
// against the service at base.
func printDemoBanner(cfg *Config, base string) {
	st := cfg.Stores[0]
	code := "demo-" + randomToken()[:22] // new at each start: a code is used once
	fmt.Printf(`
Demo configuration (for trying it out; never deploy it).
  store id: %s
  API key:  %s
  open %s/ in a browser and click "Link to game".
  the merchant dashboard: %s/dashboard (sign in with the store id and API key above).

Register an auth code as a game app would:
  curl -i %s/stores/%s/auth/auth-code \
    -H 'X-API-Key: %s' -H 'Content-Type: application/json' \
    -d '{"auth_code":"%s","redirect_uri":"%s/stores/%s/auth/callback","client_reference_id":"player-42","code_challenge":"9kVljBY-KYin_nAeGRHZH5PvwxsK-itoVUhYZQ8SOzs","state":"xyz"}'

Exchange it as the webshop would, with the verifier whose S256 hash is that challenge:
  curl -i %s/stores/%s/auth/token -d grant_type=authorization_code \
    -d code=%s -d code_verifier=dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY \
    --data-urlencode redirect_uri=%s/stores/%s/auth/callback

Open the link URL that starts the deep-link flow:
  curl -i '%s/stores/%s/auth/link?return_to=/'

`, st.ID, st.APIKeys[0], base, base, base, st.ID, st.APIKeys[0], code, base, st.ID, base, st.ID, code, base, st.ID, base, st.ID)
}
