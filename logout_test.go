package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func logoutURL(ts *httptest.Server, store string) string {
	return ts.URL + "/stores/" + store + "/auth/logout"
}

// signedIn returns a new access token of store A's player.
func signedIn(t *testing.T, ts *httptest.Server) string {
	t.Helper()
	r := mustRegister(t, ts, storeA, keyA)
	return requireToken(t, postForm(t, tokenURL(ts, storeA), r.form())).AccessToken
}

// TestLogout: signing out ends the session of the bearer token or the
// session cookie, at once (the token is refused after), clears the
// cookie, and answers 204, or 303 to a path on this site for a form.
// Without a session of the store, there is nothing to end: the same
// answer, and another store's session stays.
func TestLogout(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	for _, tt := range []struct {
		name        string
		store       string
		cookie      bool   // the token in the session cookie, not a bearer header
		returnTo    string // a form post's field, "" for none
		wantStatus  int
		wantWhere   string // Location
		wantEnded   bool   // the token refused after
		wantCleared bool   // the cookie cleared
	}{
		{"bearer token", storeA, false, "", 204, "", true, false},
		{"session cookie", storeA, true, "", 204, "", true, true},
		{"form with return_to", storeA, true, "/shop/cart?x=1", 303, "/shop/cart?x=1", true, true},
		{"form with another origin's return_to", storeA, true, "//evil.example.com/", 303, "/", true, true},
		{"store A's token at store B", storeB, true, "", 204, "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := signedIn(t, ts)
			var body *strings.Reader
			headers := []string{"Content-Type", "application/x-www-form-urlencoded"}
			if tt.returnTo != "" {
				body = strings.NewReader(url.Values{"return_to": {tt.returnTo}}.Encode())
			} else {
				body = strings.NewReader("")
			}
			if tt.cookie {
				headers = append(headers, "Cookie", sessionCookie+"="+tok)
			} else {
				headers = append(headers, "Authorization", "Bearer "+tok)
			}
			got := call(t, http.MethodPost, logoutURL(ts, tt.store), body, headers...)
			require.Equal(t, tt.wantStatus, got.status, "POST logout: body %s", got.body)
			assert.Equal(t, tt.wantWhere, got.header.Get("Location"), "Location")
			assert.Equal(t, "no-store", got.header.Get("Cache-Control"), "Cache-Control")
			cleared := false
			for _, c := range got.resp.Cookies() {
				cleared = cleared || c.Name == sessionCookie && c.MaxAge < 0
			}
			assert.Equal(t, tt.wantCleared, cleared, "session cookie cleared")
			wantMe := http.StatusOK
			if tt.wantEnded {
				wantMe = http.StatusUnauthorized
			}
			assert.Equal(t, wantMe, me(t, ts, storeA, tok).status, "GET me with the token after")
		})
	}

	t.Run("nothing to end", func(t *testing.T) {
		for _, headers := range [][]string{
			nil,
			{"Authorization", "Bearer " + newAuthCode(t)},
			{"Cookie", sessionCookie + "=" + newAuthCode(t)},
		} {
			got := call(t, http.MethodPost, logoutURL(ts, storeA), nil, headers...)
			assert.Equal(t, http.StatusNoContent, got.status, "POST logout with %q: body %s", headers, got.body)
		}
	})
	t.Run("twice", func(t *testing.T) {
		tok := signedIn(t, ts)
		for i := range 2 {
			got := call(t, http.MethodPost, logoutURL(ts, storeA), nil, "Authorization", "Bearer "+tok)
			assert.Equal(t, http.StatusNoContent, got.status, "POST logout #%d", i+1)
		}
	})
	t.Run("unknown store", func(t *testing.T) {
		got := call(t, http.MethodPost, logoutURL(ts, storeNone), nil, "Authorization", "Bearer "+signedIn(t, ts))
		requireAPIError(t, got, http.StatusNotFound, "store_not_found")
	})
	t.Run("preflight from a redirect domain", func(t *testing.T) {
		got := call(t, http.MethodOptions, logoutURL(ts, storeA), nil,
			"Origin", "https://shop.example.com", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization")
		assert.Equal(t, http.StatusNoContent, got.status)
		assert.Equal(t, "https://shop.example.com", got.header.Get("Access-Control-Allow-Origin"))
		assert.Equal(t, "Authorization", got.header.Get("Access-Control-Allow-Headers"))
	})
}
