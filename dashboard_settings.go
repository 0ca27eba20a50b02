package main

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"deeplink/internal/store"
)

// The dashboard's Settings page: the store's name and Game Authorize URL,
// its redirect domains, the association-file check and its API keys.
// Every change goes through the API handler that makes it (server.call),
// which validates, writes and logs it: one implementation of each rule.

func (s *server) dashSettingsRoutes(mux *http.ServeMux) {
	get := func(p string, h func(http.ResponseWriter, *http.Request, *dashSession)) {
		mux.HandleFunc("GET "+p, s.dashHeaders(s.signedIn(h)))
	}
	post := func(p string, h func(http.ResponseWriter, *http.Request, *dashSession)) {
		mux.HandleFunc("POST "+p, s.dashHeaders(s.dashChange(s.signedIn(h))))
	}
	const key = "/dashboard/settings/api-keys/{key_id}"
	get("/dashboard/settings", s.dashSettings)
	post("/dashboard/settings", s.dashSaveSettings)
	post("/dashboard/settings/check", s.dashCheckAssociation)
	post("/dashboard/settings/api-keys", s.dashCreateKey)
	get("/dashboard/settings/new-key", s.dashNewKey)
	get(key+"/revoke", s.dashConfirmRevoke)
	post(key+"/revoke", s.dashRevokeKey)
}

// settingsDone is the line the Settings page shows after the change it
// was sent to from: fixed texts only, so a link cannot put words on it.
func settingsDone(done string) string {
	return map[string]string{
		"saved":   "Settings saved.",
		"revoked": "API key revoked. It is refused from now on.",
	}[done]
}

// settingsPage is the Settings page's data for sess: the settings as they
// stood when the request began, and the store's keys.
func (s *server) settingsPage(sess *dashSession) map[string]any {
	p := s.page(sess, "Settings", "settings")
	set := sess.Settings
	p["Form"] = map[string]string{"name": set.Name, "game_authorize_url": set.GameAuthorizeURL}
	if set.GameAuthorizeURL != "" {
		if _, warn := s.checkGameAuthorizeURL(set.GameAuthorizeURL); warn != "" {
			p["Warning"] = warn
		}
	}
	keys := listKeys(sess.Store, &set)
	p["Keys"], p["KeyID"], p["MaxKeys"] = keys, sess.keyID, maxStoreKeys
	return p
}

func (s *server) dashSettings(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	p := s.settingsPage(sess)
	p["Done"] = settingsDone(r.URL.Query().Get("done"))
	s.render(w, http.StatusOK, "settings.html", p)
}

// dashCheckAssociation is the Settings page with the report of the
// association files of the Game Authorize URL as saved.
func (s *server) dashCheckAssociation(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	p := s.settingsPage(sess)
	files, err := s.checkAssociation(r.Context(), sess.Settings.GameAuthorizeURL)
	p["Checked"], p["Files"] = true, files
	if err != nil {
		p["CheckError"] = err.Error()
	}
	s.render(w, http.StatusOK, "settings.html", p)
}

// dashSaveSettings saves the form's name and Game Authorize URL through
// the settings' PATCH; an empty URL turns sign-in off (the API's null). A
// refusal shows the page again with the values as typed and the API's
// reason under each field, nothing changed.
func (s *server) dashSaveSettings(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	name := r.PostFormValue("name")
	game := strings.TrimSpace(r.PostFormValue("game_authorize_url"))
	body := map[string]any{"name": name, "game_authorize_url": nil}
	if game != "" {
		body["game_authorize_url"] = game
	}
	a := s.call(r.Context(), sess.Store, apiCall{method: "PATCH", body: body}, s.handlePatchSettings)
	if a.status == http.StatusUnprocessableEntity && a.Error != nil {
		p := s.settingsPage(sess)
		errs := map[string]string{}
		for _, f := range a.Error.Fields {
			errs[f.Field] = f.Message
		}
		p["Form"], p["Errors"] = map[string]string{"name": name, "game_authorize_url": game}, errs
		s.render(w, http.StatusUnprocessableEntity, "settings.html", p)
		return
	}
	if a.status != http.StatusOK {
		s.failed(w, sess, a)
		return
	}
	http.Redirect(w, r, "/dashboard/settings?done=saved", http.StatusSeeOther)
}

// dashCreateKey makes an API key with the form's label through the keys'
// POST, then sends the browser to the page that shows it once.
func (s *server) dashCreateKey(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	label := r.PostFormValue("label")
	a := s.call(r.Context(), sess.Store, apiCall{method: "POST", body: map[string]string{"label": label}}, s.handleCreateKey)
	if a.status == http.StatusUnprocessableEntity && a.Error != nil {
		p := s.settingsPage(sess)
		msg := ""
		for _, f := range a.Error.Fields {
			if f.Field == "label" {
				msg = "Label "
			}
			msg += f.Message
		}
		p["KeyError"], p["Label"] = upperFirst(msg)+".", label
		s.render(w, http.StatusUnprocessableEntity, "settings.html", p)
		return
	}
	var made keyView
	if a.status != http.StatusCreated || json.Unmarshal(a.Data, &made) != nil {
		s.failed(w, sess, a)
		return
	}
	c, _ := r.Cookie(dashCookie) // signedIn found the session by it
	sealed := sealNewKey(c.Value, sess.key, made.Key)
	if err := s.store.Put(r.Context(), sess.key+":new-key", sealed, s.now().Add(5*time.Minute)); err != nil {
		s.dashUnavailable(w, sess)
		return
	}
	http.Redirect(w, r, "/dashboard/settings/new-key", http.StatusSeeOther)
}

// upperFirst is m with its first letter in upper case.
func upperFirst(m string) string {
	if m == "" || m[0] < 'a' || m[0] > 'z' {
		return m
	}
	return string(m[0]-'a'+'A') + m[1:]
}

// sealNewKey seals key, a new API key, for the one page that shows it,
// with a key derived from the session's cookie value: the state holds
// only the cookie's hash, so what it keeps for those minutes is no usable
// API key (only its SHA-256 is kept for good). sessKey binds it to the
// session.
func sealNewKey(cookie, sessKey, key string) []byte {
	aead := newKeySealer(cookie)
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand)
	return aead.Seal(nonce, nonce, []byte(key), []byte(sessKey))
}

// openNewKey opens what sealNewKey sealed.
func openNewKey(cookie, sessKey string, sealed []byte) (string, error) {
	aead := newKeySealer(cookie)
	if len(sealed) < aead.NonceSize() {
		return "", errors.New("sealed key: too short")
	}
	b, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(sessKey))
	return string(b), err
}

func newKeySealer(cookie string) cipher.AEAD {
	k := sha256.Sum256([]byte("deeplink dashboard new api key\x00" + cookie))
	block, _ := aes.NewCipher(k[:]) // a 32-byte key: AES-256
	aead, _ := cipher.NewGCM(block)
	return aead
}

// dashNewKey shows, once, the key the change before it made; opened
// again, or otherwise, it goes to the Settings page.
func (s *server) dashNewKey(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	sealed, err := s.store.Take(r.Context(), sess.key+":new-key")
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.dashUnavailable(w, sess)
		return
	}
	c, _ := r.Cookie(dashCookie)
	key, err := openNewKey(c.Value, sess.key, sealed)
	if err != nil || key == "" {
		http.Redirect(w, r, "/dashboard/settings", http.StatusSeeOther)
		return
	}
	p := s.page(sess, "API key created", "settings")
	p["Key"] = key
	sum := sha256.Sum256([]byte(key))
	id := keyID(sum)
	for _, k := range listKeys(sess.Store, &sess.Settings) {
		if k.ID == id {
			p["Made"] = k
		}
	}
	s.render(w, http.StatusOK, "newkey.html", p)
}

// keyOf returns the store's key of the path's key_id, or nil.
func keyOf(r *http.Request, sess *dashSession) *keyView {
	for _, k := range listKeys(sess.Store, &sess.Settings) {
		if k.ID == r.PathValue("key_id") {
			return &k
		}
	}
	return nil
}

// dashConfirmRevoke asks before a key is revoked.
func (s *server) dashConfirmRevoke(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	k := keyOf(r, sess)
	if k == nil {
		s.failed(w, sess, apiAnswer{status: errNoKey.Status, Error: errNoKey})
		return
	}
	if k.Source != "merchant" {
		s.failed(w, sess, apiAnswer{status: errConfigKey.Status, Error: errConfigKey})
		return
	}
	p := s.page(sess, "Revoke API key", "settings")
	p["Key"], p["Own"] = k, k.ID == sess.keyID
	s.render(w, http.StatusOK, "revoke.html", p)
}

// dashRevokeKey revokes the path's key through the keys' DELETE. Revoking
// the key this session signed in with ends the session (the API does):
// the browser is then sent to sign in, and told why.
func (s *server) dashRevokeKey(w http.ResponseWriter, r *http.Request, sess *dashSession) {
	id := r.PathValue("key_id")
	a := s.call(r.Context(), sess.Store, apiCall{method: "DELETE", path: map[string]string{"key_id": id}}, s.handleRevokeKey)
	if a.status != http.StatusNoContent {
		s.failed(w, sess, a)
		return
	}
	if id != sess.keyID {
		http.Redirect(w, r, "/dashboard/settings?done=revoked", http.StatusSeeOther)
		return
	}
	// Ended already; its entry goes now rather than at its expiry.
	if err := s.store.Delete(context.WithoutCancel(r.Context()), sess.key); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("dashboard: the entry of a session whose key was revoked stays until it expires", "store", sess.Store.ID, "err", err)
	}
	http.SetCookie(w, &http.Cookie{Name: dashCookie, Path: "/dashboard", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	http.Redirect(w, r, "/dashboard/sign-in?"+url.Values{"ended": {"revoked"}}.Encode(), http.StatusSeeOther)
}
