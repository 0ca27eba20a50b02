package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"deeplink/internal/config"
	"deeplink/internal/store"
)

// A store's settings (docs/api.md, store settings and API keys): its name,
// its Game Authorize URL and the API keys made in the merchant area, one
// record in the state store under settingsKey, so that they are as
// durable as any other state and shared by every process on the store.
// The configuration file seeds the record at the store's first start
// (seedSettings); from then on the record stands. Every request that
// needs a setting reads the record: a change made through one replica is
// in force on the next request to any.

// settingsPrefix starts the store keys of the stores' settings.
const settingsPrefix = "settings:"

// settingsKey is where the settings of the store whose configured id is
// id are kept.
func settingsKey(id string) string { return settingsPrefix + id }

// storeSettings is the record under settingsKey, as JSON.
type storeSettings struct {
	Name             string `json:"name"`
	GameAuthorizeURL string `json:"game_authorize_url,omitempty"` // "": sign-in is off
	UpdatedAt        int64  `json:"updated_at"`                   // Unix seconds
	// Keys are the keys made in the merchant area, oldest first.
	Keys []merchantKey `json:"keys,omitempty"`
	// ConfigKeys holds when each key of the configuration file was first
	// seen, by key id: their created_at.
	ConfigKeys map[string]int64 `json:"config_keys,omitempty"`
	// LastUsed holds when each key, of the file or the merchant area, was
	// last used, to the minute (Unix seconds), by key id (keyUsed).
	LastUsed map[string]int64 `json:"last_used,omitempty"`
	// NextSerial numbers the next merchant key: a key's serial names its
	// request budget among the fairness counters, and is never reused.
	NextSerial int `json:"next_serial"`
}

// merchantKey is an API key made in the merchant area. The key itself is
// never kept, only its SHA-256.
type merchantKey struct {
	ID        string `json:"id"`
	Label     string `json:"label"`
	Prefix    string `json:"prefix"`     // the key's first keyPrefixLen characters
	SHA256    string `json:"sha256"`     // hex
	CreatedAt int64  `json:"created_at"` // Unix seconds
	Serial    int    `json:"serial"`
}

// keyID is the id of the API key whose SHA-256 is sum: derived from the
// hash, so that a key of the configuration file has the same id on every
// replica and after every restart, and the id does not give the hash away.
func keyID(sum [sha256.Size]byte) string {
	id := sha256.Sum256(append([]byte("deeplink api key id\x00"), sum[:]...))
	return "key_" + hex.EncodeToString(id[:12])
}

// settingsFromConfig is the record the configuration file seeds for st.
func settingsFromConfig(st *StoreConfig, now time.Time) storeSettings {
	v := storeSettings{Name: st.Name, GameAuthorizeURL: st.GameAuthorizeURL, UpdatedAt: now.Unix(), ConfigKeys: map[string]int64{}}
	for _, h := range st.KeyHashes() {
		v.ConfigKeys[keyID(h)] = now.Unix()
	}
	return v
}

// errSettingsDamaged: the stored record cannot be read. It is the state's
// own, written by this service: never a client's fault.
var errSettingsDamaged = errors.New("store settings: the stored record is not valid JSON")

// loadSettings returns st's settings and the record as stored (nil when
// there is none: the store was never started on this state, or Redis lost
// it; the configuration file's values then stand, until seeded again).
func (s *server) loadSettings(ctx context.Context, st *StoreConfig) (storeSettings, []byte, error) {
	b, err := s.store.Get(ctx, settingsKey(st.ID))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return settingsFromConfig(st, s.now()), nil, nil
	case err != nil:
		return storeSettings{}, nil, err
	}
	var v storeSettings
	if err := json.Unmarshal(b, &v); err != nil {
		return storeSettings{}, nil, fmt.Errorf("%w: %v", errSettingsDamaged, err)
	}
	return v, b, nil
}

// settingsOf returns st's settings as they stand now.
func (s *server) settingsOf(ctx context.Context, st *StoreConfig) (storeSettings, error) {
	v, _, err := s.loadSettings(ctx, st)
	return v, err
}

// errEditAgain: editSettings gave up, the record having changed under it
// at each of its tries.
var errEditAgain = errors.New("store settings: too many concurrent changes")

// editSettings changes st's settings by edit, atomically: it reads the
// record, lets edit change it, and writes it back by CompareAndSwap,
// again from the read while another process changed it meanwhile. An
// error of edit leaves the record as it was and is returned. It returns
// the record as written.
func (s *server) editSettings(ctx context.Context, st *StoreConfig, edit func(*storeSettings) error) (storeSettings, error) {
	for range 16 {
		v, old, err := s.loadSettings(ctx, st)
		if err != nil {
			return storeSettings{}, err
		}
		if err := edit(&v); err != nil {
			return storeSettings{}, err
		}
		b, _ := json.Marshal(v)
		switch err := s.store.CompareAndSwap(ctx, settingsKey(st.ID), old, b, time.Time{}); {
		case err == nil:
			return v, nil
		case !errors.Is(err, store.ErrConflict):
			return storeSettings{}, err
		}
	}
	return storeSettings{}, errEditAgain
}

// seedSettings seeds the settings of every configured store that has
// none from the configuration file (Insert: of two replicas starting at
// once, one seeds; a later start changes nothing). For a store that has
// them, it adds the configuration file's keys not seen before (their
// created_at), forgets those the file no longer has, and returns a warning for each field the file now gives
// otherwise than the record, which stands. The demo's own game app, which
// moves with the port the demo listens on, is moved with it.
func (s *server) seedSettings(ctx context.Context, demo bool) ([]string, error) {
	var warnings []string
	for _, st := range s.cfg.Stores {
		seed := settingsFromConfig(st, s.now())
		b, _ := json.Marshal(seed)
		err := s.store.Insert(ctx, settingsKey(st.ID), b, time.Time{})
		if err == nil {
			continue
		}
		if !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("store %s: seeding its settings: %w", st.ID, err)
		}
		var differ []string
		_, err = s.editSettings(ctx, st, func(v *storeSettings) error {
			differ = differ[:0]
			changed := false
			if v.ConfigKeys == nil {
				v.ConfigKeys = map[string]int64{}
			}
			for id, at := range seed.ConfigKeys {
				if _, ok := v.ConfigKeys[id]; !ok {
					v.ConfigKeys[id], changed = at, true
				}
			}
			for id := range v.ConfigKeys { // removed from the file
				if _, ok := seed.ConfigKeys[id]; !ok {
					delete(v.ConfigKeys, id)
					delete(v.LastUsed, id)
					changed = true
				}
			}
			if demo && v.GameAuthorizeURL != st.GameAuthorizeURL && strings.HasSuffix(v.GameAuthorizeURL, demoGamePath) {
				v.GameAuthorizeURL, changed = st.GameAuthorizeURL, true
			}
			// A field the file leaves out says nothing: no warning.
			if st.Name != "" && v.Name != st.Name {
				differ = append(differ, "name")
			}
			if st.GameAuthorizeURL != "" && v.GameAuthorizeURL != st.GameAuthorizeURL {
				differ = append(differ, "game_authorize_url")
			}
			if !changed {
				return errKeepSettings
			}
			return nil
		})
		if err != nil && !errors.Is(err, errKeepSettings) {
			return nil, fmt.Errorf("store %s: reading its settings: %w", st.ID, err)
		}
		for _, f := range differ {
			warnings = append(warnings, fmt.Sprintf("store %s: %s in the configuration file differs from the stored settings, which stand (the file seeds a store's settings at its first start only; change them in the merchant area)", st.ID, f))
		}
	}
	return warnings, nil
}

// errKeepSettings is what an edit of seedSettings returns when it has
// nothing to write.
var errKeepSettings = errors.New("store settings: nothing to change")

// demoGamePath is the path of the demo's game app.
const demoGamePath = "/demo/game/authorize"

// storePage is a store as pages show it: its configuration, with the name
// and Game Authorize URL of its settings in place of the file's.
type storePage struct {
	*StoreConfig
	Name             string
	GameAuthorizeURL string
}

// page returns st as pages show it with the settings v.
func (v storeSettings) page(st *StoreConfig) *storePage {
	return &storePage{StoreConfig: st, Name: v.Name, GameAuthorizeURL: v.GameAuthorizeURL}
}

// settingsRoutes adds the routes of a store's settings and API keys.
func (s *server) settingsRoutes(mux *http.ServeMux) {
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request, *StoreConfig){
		"GET /stores/{store_id}/settings":   s.handleGetSettings,
		"PATCH /stores/{store_id}/settings": s.handlePatchSettings,
	} {
		mux.HandleFunc(pattern, s.bounded(s.withStore(h)))
	}
}

// settingsView is the settings as the API shows them.
type settingsView struct {
	ID               string   `json:"id"`
	Name             string   `json:"name"`
	GameAuthorizeURL *string  `json:"game_authorize_url"`
	RedirectDomains  []string `json:"redirect_domains"`
	UpdatedAt        int64    `json:"updated_at"`
}

func (v storeSettings) view(st *StoreConfig) settingsView {
	sv := settingsView{ID: st.ID, Name: v.Name, RedirectDomains: st.RedirectDomains, UpdatedAt: v.UpdatedAt}
	if sv.RedirectDomains == nil {
		sv.RedirectDomains = []string{}
	}
	if v.GameAuthorizeURL != "" {
		sv.GameAuthorizeURL = &v.GameAuthorizeURL
	}
	return sv
}

func (s *server) handleGetSettings(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.settingsOf(r.Context(), st)
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": v.view(st)})
}

// settingsRequest is the body of the settings' PATCH. Fields are raw, so
// that a field left out, null and of the wrong type are told apart.
type settingsRequest struct {
	Name             json.RawMessage `json:"name"`
	GameAuthorizeURL json.RawMessage `json:"game_authorize_url"`
}

// settingsChange is a valid PATCH: the fields it changes.
type settingsChange struct {
	name, game *string // nil: unchanged; game "": sign-in off
	warnings   []fieldError
}

// validate checks every field of req by the rules of docs/api.md.
func (s *server) validateSettings(req *settingsRequest) (c settingsChange, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	switch {
	case len(req.Name) == 0:
	case string(req.Name) == "null":
		bad("name", "must be a string of 1 to 100 characters")
	case usable("name", req.Name, bad):
		var n string
		switch {
		case json.Unmarshal(req.Name, &n) != nil:
			bad("name", "must be a string of 1 to 100 characters")
		case strings.TrimSpace(n) == "":
			bad("name", "is required: 1 to 100 characters, not all spaces")
		case utf8.RuneCountInString(n) > 100:
			bad("name", "is longer than 100 characters")
		case hasControl(n):
			bad("name", "must not contain control characters")
		default:
			c.name = &n
		}
	}
	switch {
	case len(req.GameAuthorizeURL) == 0:
	case string(req.GameAuthorizeURL) == "null":
		off := ""
		c.game = &off
	case usable("game_authorize_url", req.GameAuthorizeURL, bad):
		var u string
		if json.Unmarshal(req.GameAuthorizeURL, &u) != nil {
			bad("game_authorize_url", "must be a string, or null to turn sign-in off")
		} else if msg, warn := s.checkGameAuthorizeURL(u); msg != "" {
			bad("game_authorize_url", msg)
		} else {
			c.game = &u
			if warn != "" {
				c.warnings = append(c.warnings, fieldError{"game_authorize_url", warn})
			}
		}
	}
	return c, fields
}

// customSchemeWarning is said of a Game Authorize URL of a custom scheme.
const customSchemeWarning = "a custom scheme can be claimed by any app installed on the player's device, not only your game; an https URL that your game's association files cover opens your game alone"

// checkGameAuthorizeURL returns why v cannot be a Game Authorize URL, or
// "" and, for one of a custom scheme, a warning.
func (s *server) checkGameAuthorizeURL(v string) (msg, warn string) {
	const invalid = "must be an absolute https URL without userinfo or fragment, or a custom scheme such as mygame://authorize"
	if len(v) > 2048 && utf8.RuneCountInString(v) > 2048 {
		return "is longer than 2048 characters", ""
	}
	if v == "" {
		return "must not be empty; null turns sign-in off", ""
	}
	if hasControl(v) || strings.ContainsAny(v, " \\#") {
		return invalid, "" // no fragment: the link adds its query, which must end the URL
	}
	scheme, rest, ok := strings.Cut(v, "://")
	scheme = strings.ToLower(scheme)
	if !ok || !isScheme(scheme) || rest == "" {
		return invalid, ""
	}
	if config.ForbiddenScheme(scheme) {
		return "must not be a " + scheme + ": URL, which cannot open a game app", ""
	}
	u, err := url.Parse(v)
	if err != nil || u.User != nil || u.Opaque != "" {
		return invalid, ""
	}
	switch scheme {
	case "https", "http":
		host := u.Hostname()
		if _, err := netip.ParseAddr(host); err != nil && !config.IsHostname(host) || strings.HasSuffix(u.Host, ":") {
			return invalid, ""
		}
		if port := u.Port(); port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return "port " + port + " must be 1 to 65535", ""
			}
		}
		if scheme == "http" && !(s.cfg.Webhooks.AllowInsecureURLs && (host == "localhost" || host == "127.0.0.1")) {
			return "must be https (http only for localhost or 127.0.0.1, where the service allows insecure URLs)", ""
		}
		return "", ""
	}
	return "", customSchemeWarning
}

// isScheme reports whether s is a lower-case URL scheme: [a-z][a-z0-9+.-]*.
func isScheme(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (s *server) handlePatchSettings(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.changeable(w) {
		return
	}
	var req settingsRequest
	if !readJSONObject(w, r, &req) {
		return
	}
	c, fields := s.validateSettings(&req)
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	var changed []string
	v, err := s.editSettings(r.Context(), st, func(v *storeSettings) error {
		changed = changed[:0]
		if c.name != nil && *c.name != v.Name {
			v.Name, changed = *c.name, append(changed, "name")
		}
		if c.game != nil && *c.game != v.GameAuthorizeURL {
			v.GameAuthorizeURL, changed = *c.game, append(changed, "game_authorize_url")
		}
		if len(changed) == 0 {
			return errKeepSettings
		}
		v.UpdatedAt = s.now().Unix()
		return nil
	})
	if errors.Is(err, errKeepSettings) {
		v, err = s.settingsOf(r.Context(), st)
	}
	if err != nil {
		s.settingsFailed(w, st, err, true)
		return
	}
	for _, f := range changed {
		s.log.Info("store settings: changed", "store", st.ID, "field", f, "key_id", requestKeyID(r))
	}
	body := map[string]any{"data": v.view(st)}
	if len(c.warnings) > 0 {
		body["warnings"] = c.warnings
	}
	writeJSON(w, http.StatusOK, body)
}

// changeable answers 503 and reports false while the service takes no
// changes: shutting down, or its store refusing them.
func (s *server) changeable(w http.ResponseWriter) bool {
	switch {
	case s.draining.Load():
		writeError(w, errShuttingDown)
		return false
	case s.storeFailing() != nil:
		writeError(w, errPersist)
		return false
	}
	return true
}

// settingsFailed answers 503 for err, an error reading or writing st's
// settings (change: writing), and logs it.
func (s *server) settingsFailed(w http.ResponseWriter, st *StoreConfig, err error, change bool) {
	if change {
		s.log.Error("store settings: a change could not be made or written; answering 503", "store", st.ID, "err", err)
		writeError(w, errPersist)
		return
	}
	s.log.Error("store settings: cannot read them; answering 503", "store", st.ID, "err", err)
	writeError(w, errStoreDown)
}

// keyIDKey is the context key of the id of the API key a request acts
// with, when it carries no X-API-Key of its own (the dashboard's calls).
type keyIDKey struct{}

// requestKeyID is the id of the API key r acts with, for the log.
func requestKeyID(r *http.Request) string {
	if id, ok := r.Context().Value(keyIDKey{}).(string); ok {
		return id
	}
	return keyID(sha256.Sum256([]byte(r.Header.Get("X-API-Key"))))
}
