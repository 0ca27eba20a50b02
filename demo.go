package main

import (
	"html/template"
	"net/http"
	"net/url"
)

// The demo serves, next to the real API, a stand-in for the two parties
// the service sits between, so that a bare `go run .` shows the whole flow
// in a browser: a home page playing the webshop, and a game app that is
// always signed in as the same player. Only the embedded demo
// configuration turns them on.

func (s *server) demoRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.handleDemoHome)
	mux.HandleFunc("GET /demo/game/authorize", s.handleDemoGame)
}

var demoHome = template.Must(template.New("").Parse(`<!doctype html>
<meta charset="utf-8"><title>Demo webshop</title>
<h1>Demo webshop of {{.Name}}</h1>
<p><a id="link" href="/stores/{{.ID}}/auth/link?return_to=/">Link to game</a></p>
<pre id="me">not signed in</pre>
<script>
fetch("/stores/{{.ID}}/auth/me").then(r => r.ok ? r.json() : null).then(j => {
  if (j) document.getElementById("me").textContent = "signed in as " + JSON.stringify(j.data.player, null, 2);
});
</script>
`))

func (s *server) handleDemoHome(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	demoHome.Execute(w, s.cfg.Stores[0])
}

// handleDemoGame plays the game app, and its backend, in the sign-in flow: it reads the
// deep link, registers a fresh code for its signed-in player, and sends
// the browser back to the webshop.
func (s *server) handleDemoGame(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := s.cfg.Store(q.Get("store_id"))
	if st == nil || q.Get("code_challenge_method") != "S256" {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "the deep link lacks store_id or code_challenge_method=S256"})
		return
	}
	code := randomToken()
	req := registerRequest{}
	for _, f := range []struct {
		dst *jsonString
		v   string
	}{
		{&req.AuthCode, code},
		{&req.RedirectURI, q.Get("redirect_uri")},
		{&req.ClientReferenceID, "demo-player-1"},
		{&req.CodeChallenge, q.Get("code_challenge")},
		{&req.State, q.Get("state")},
		{&req.FirstName, "Ada"},
		{&req.LastName, "Lovelace"},
		{&req.Language, "en"},
		{&req.Country, "GB"},
		{&req.Timezone, "Europe/London"},
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
	http.Redirect(w, r, back.String(), http.StatusFound)
}
