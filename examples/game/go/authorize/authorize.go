// Package authorize is the game side of deep-link sign-in: the handler the
// webshop's deep link opens (the store's Game Authorize URL). It registers
// a one-time code for the game's signed-in player with the deeplink service
// and sends the browser back to the webshop with it, or, when the service
// refuses, shows why and sends the browser nowhere.
//
// Standard library only: copy this file into your game backend and mount
// a Handler at the path of your Game Authorize URL.
package authorize

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Player is who is signed in to the game: the fields of the registration
// body (the service's API reference, "Register an auth code").
// ClientReferenceID is required; the others may be left empty.
type Player struct {
	ClientReferenceID string `json:"client_reference_id"`
	FirstName         string `json:"first_name,omitempty"`
	LastName          string `json:"last_name,omitempty"`
	Language          string `json:"language,omitempty"` // a tag such as "en" or "pt-BR"
	Currency          string `json:"currency,omitempty"` // ISO 4217, "GBP"
	Country           string `json:"country,omitempty"`  // ISO 3166-1 alpha-2, "GB"
	Timezone          string `json:"timezone,omitempty"` // IANA, "Europe/London"
}

// Handler answers GET on the Game Authorize URL.
type Handler struct {
	APIBase string // the deeplink service, e.g. "https://deeplink.example.com"
	StoreID string // your store's id
	APIKey  string // one of your store's API keys: a secret, keep it on the server
	// Player returns the player signed in to the game for this request,
	// from your own session (a cookie, or the app's bearer token).
	Player func(r *http.Request) (Player, error)
	// Client makes the registration calls; nil means one with a 10 s timeout.
	Client *http.Client
}

// maxAttempts bounds the registration calls for one deep link: a 503 is
// retried after its Retry-After, twice at most, then shown.
const maxAttempts = 3

// apiError is the service's error body: {"error": {...}}.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fields  []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"fields"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// 1. Decode. Query().Get percent-decodes redirect_uri once; this decoded
	// value is the one registered and the one redirected to.
	q := r.URL.Query()
	redirectURI, state := q.Get("redirect_uri"), q.Get("state")
	if q.Get("store_id") != h.StoreID {
		showError(w, http.StatusBadRequest, &apiError{Code: "wrong_store", Message: "This sign-in link is for another store."})
		return
	}
	player, err := h.Player(r)
	if err != nil {
		showError(w, http.StatusUnauthorized, &apiError{Code: "not_signed_in", Message: "Sign in to the game first, then open the link again."})
		return
	}

	// 2. Generate: 32 random bytes, base64url without padding (43 characters).
	b := make([]byte, 32)
	rand.Read(b) // crypto/rand: never fails
	code := base64.RawURLEncoding.EncodeToString(b)

	// 3. Register the code with the deep link's values, passed through unchanged.
	body, _ := json.Marshal(struct {
		AuthCode      string `json:"auth_code"`
		RedirectURI   string `json:"redirect_uri"`
		CodeChallenge string `json:"code_challenge"`
		State         string `json:"state"`
		Player
	}{code, redirectURI, q.Get("code_challenge"), state, player})
	if e := h.register(r, body); e != nil {
		// On failure: show the error, never redirect.
		showError(w, http.StatusBadGateway, e)
		return
	}

	// 4. Only now send the browser back, to the same decoded redirect_uri.
	sep := "?"
	if strings.Contains(redirectURI, "?") {
		sep = "&"
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, redirectURI+sep+"code="+url.QueryEscape(code)+"&state="+url.QueryEscape(state), http.StatusFound)
}

// register posts the registration, retrying a 503 after its Retry-After;
// any other failure, a 4xx above all, is returned at once.
func (h *Handler) register(r *http.Request, body []byte) *apiError {
	client := h.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	for attempt := 1; ; attempt++ {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost,
			h.APIBase+"/stores/"+url.PathEscape(h.StoreID)+"/auth/auth-code", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", h.APIKey)
		resp, err := client.Do(req)
		if err != nil {
			log.Printf("registering an auth code: %v", err)
			return &apiError{Code: "unreachable", Message: "The sign-in service could not be reached. Try again in a moment."}
		}
		var out struct{ Error *apiError }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		if out.Error == nil { // not the service's error shape (a proxy's page, say)
			out.Error = &apiError{Code: "http_" + strconv.Itoa(resp.StatusCode), Message: http.StatusText(resp.StatusCode)}
		}
		if resp.StatusCode != http.StatusServiceUnavailable || attempt == maxAttempts {
			return out.Error
		}
		select { // wait as asked, 1 to 5 s: a player is waiting
		case <-time.After(retryAfter(resp.Header.Get("Retry-After"))):
		case <-r.Context().Done(): // the browser left
			return out.Error
		}
	}
}

// retryAfter reads Retry-After's seconds form, kept within 1 to 5 s.
func retryAfter(v string) time.Duration {
	s, err := strconv.Atoi(v)
	if err != nil {
		s = 1
	}
	return time.Duration(min(max(s, 1), 5)) * time.Second
}

// showError answers the in-app page that says why sign-in failed: the
// service's error code and message, and each invalid field.
func showError(w http.ResponseWriter, status int, e *apiError) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html>\n<meta charset=\"utf-8\"><title>Sign-in failed</title>\n<h1>Sign-in failed</h1>\n<p>%s</p>\n<p>Error code: <code>%s</code></p>\n",
		html.EscapeString(e.Message), html.EscapeString(e.Code))
	if len(e.Fields) > 0 {
		fmt.Fprint(w, "<ul>\n")
		for _, f := range e.Fields {
			fmt.Fprintf(w, "<li><code>%s</code>: %s</li>\n", html.EscapeString(f.Field), html.EscapeString(f.Message))
		}
		fmt.Fprint(w, "</ul>\n")
	}
}
