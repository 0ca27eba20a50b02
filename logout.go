package main

import (
	"errors"
	"net/http"

	"deeplink/internal/store"
)

// logoutCORS lets a page on the store's redirect domains sign its player
// out with the token it holds.
var logoutCORS = corsPolicy{methods: "POST", headers: "Authorization"}

// handleLogout is POST /stores/{store_id}/auth/logout: it ends the
// player's session, the one of the session cookie or of an Authorization
// header's bearer token. The token is deleted from the store, so every
// replica refuses it from then on, and the cookie is cleared. It answers
// 204, or 303 to return_to (a path on this site; "/" otherwise) when the
// request names one, as a form's post does. A request without a session,
// or with one already ended or of another store, has nothing to end and
// gets the same answer: signing out twice is not an error.
func (s *server) handleLogout(w http.ResponseWriter, r *http.Request) {
	s.allowCORS(w, r, logoutCORS)
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	gone := true // the session is no more: ended here, or before
	if token, ok := playerToken(r); ok && token != "" {
		key := tokenKey(token).name()
		v, err := s.store.Get(r.Context(), key)
		if err == nil {
			if sess, ok := decodeSession(v); ok && sess.StoreID == st.ID {
				err = s.store.Delete(r.Context(), key)
			} else {
				gone = false // another store's: not this one's to end
			}
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			writeError(w, errPersist)
			return
		}
	}
	if c, err := r.Cookie(sessionCookie); err == nil && (gone || c.Value == "") {
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
	}
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10) // a form of one field
	if to := r.FormValue("return_to"); to != "" {
		http.Redirect(w, r, safeReturnTo(to), http.StatusSeeOther)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
