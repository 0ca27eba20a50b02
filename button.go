package main

import (
	"net/http"
	"strings"
)

// configCORS lets a page on the store's redirect domains ask whether
// sign-in is on.
var configCORS = corsPolicy{methods: "GET", headers: "Content-Type"}

// handleAuthConfig is GET /stores/{store_id}/auth/config: whether the
// store has sign-in on (a Game Authorize URL in its settings, and
// public_base_url set), and where
// its link starts. No key: a webshop page asks it, as the drop-in button
// does. Never cached without asking again, so that a change in the
// merchant area shows at the next load.
func (s *server) handleAuthConfig(w http.ResponseWriter, r *http.Request) {
	s.allowCORS(w, r, configCORS)
	st := s.storeFor(w, r)
	if st == nil {
		return
	}
	set, err := s.settingsOf(r.Context(), st)
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	on := set.GameAuthorizeURL != "" && s.publicBase(r) != ""
	data := map[string]any{"link_to_game": on}
	if on {
		data["link_url"] = strings.TrimSuffix(s.callbackURL(r, st), "callback") + "link"
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data})
}

// serveButton serves the drop-in button's file name (web/button) for
// the pages of a known store: the script reads the store from its own
// address.
func (s *server) serveButton(name, contentType string) http.HandlerFunc {
	body, err := webFiles.ReadFile("web/button/" + name)
	if err != nil {
		panic(err) // embedded: present in every build
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if s.storeFor(w, r) == nil {
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "public, max-age=300")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(body)
	}
}
