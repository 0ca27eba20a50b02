package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// A store's API keys (docs/api.md, store settings and API keys): those of
// the configuration file, which are the operator's, and those made in the
// merchant area, kept in the store's settings record as SHA-256 hashes.
// A request's key is compared with the file's first, in process; any
// other key is looked up in the record as it stands at that request, so
// that a key revoked through one replica is refused by every replica from
// the next request on.

const (
	maxStoreKeys = 10 // every key of a store, the file's and the merchant area's
	keyPrefixLen = 12 // of a key, shown in lists
	maxKeyLabel  = 100
)

// apiKeyOf returns the slot of st's key key, or nil when key is none of
// st's. A key not in the configuration file is looked for in st's
// settings record, whose read may fail (err).
func (s *server) apiKeyOf(ctx context.Context, st *StoreConfig, key string) (*keySlot, error) {
	sv := s.views.of(st.ID)
	if idx := keyIndex(st, key); idx >= 0 {
		return sv.configKey(idx), nil
	}
	if key == "" {
		return nil, nil
	}
	set, err := s.settingsOf(ctx, st)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(key))
	if i := set.merchantKeyIndex(hex.EncodeToString(sum[:])); i >= 0 {
		return sv.merchantKey(&set.Keys[i]), nil
	}
	return nil, nil
}

// merchantKeyIndex returns the index among v.Keys of the key whose SHA-256
// is sum (hex), or -1. Every key is compared, in constant time.
func (v *storeSettings) merchantKeyIndex(sum string) int {
	idx := -1
	for i := range v.Keys {
		eq := subtle.ConstantTimeCompare([]byte(v.Keys[i].SHA256), []byte(sum))
		idx = subtle.ConstantTimeSelect(eq, i, idx)
	}
	return idx
}

// keyLive reports whether the key whose SHA-256 is sum (hex) is still one
// of st's, with the settings v: a dashboard session ends with the key it
// was signed in with, whether the operator removed it from the file or
// the merchant revoked it.
func keyLive(st *StoreConfig, v *storeSettings, sum string) bool {
	live := 0
	for _, h := range st.KeyHashes() {
		live |= subtle.ConstantTimeCompare([]byte(hex.EncodeToString(h[:])), []byte(sum))
	}
	return live == 1 || v.merchantKeyIndex(sum) >= 0
}

// keyUsed records that k, a key of st, was used now, to the minute, in
// st's settings (LastUsed): this process writes it at most once a minute
// for each key, so that a request waits for no write but the minute's
// first, and never moves it back (another replica may have written a
// later minute). A write that fails is left to the next request.
func (s *server) keyUsed(ctx context.Context, st *StoreConfig, k *keySlot) {
	m := s.now().Unix() / 60
	old := k.used.Load()
	if old == m || !k.used.CompareAndSwap(old, m) {
		return
	}
	_, err := s.editSettings(ctx, st, func(v *storeSettings) error {
		if v.LastUsed[k.id] >= m*60 || k.kind == "mkey:" && !v.hasKey(k.id) {
			return errKeepSettings // written by another, or revoked meanwhile
		}
		if v.LastUsed == nil {
			v.LastUsed = map[string]int64{}
		}
		v.LastUsed[k.id] = m * 60
		return nil
	})
	if err != nil && !errors.Is(err, errKeepSettings) {
		k.used.CompareAndSwap(m, old)
	}
}

// hasKey reports whether the merchant area's key id is one of v's.
func (v *storeSettings) hasKey(id string) bool {
	for i := range v.Keys {
		if v.Keys[i].ID == id {
			return true
		}
	}
	return false
}

// keyView is an API key as the API lists it: never the key itself.
type keyView struct {
	ID         string  `json:"id"`
	Label      string  `json:"label"`
	Prefix     *string `json:"prefix"`
	Source     string  `json:"source"` // "config" or "merchant"
	CreatedAt  *int64  `json:"created_at"`
	LastUsedAt *int64  `json:"last_used_at"`
	Key        string  `json:"key,omitempty"` // once: in the answer that made it
}

// listKeys returns every key of st, the file's first, then the merchant
// area's, oldest first, with their last use, by the settings v.
func listKeys(st *StoreConfig, v *storeSettings) []keyView {
	var list []keyView
	for i, k := range st.APIKeys {
		p := prefixOf(k)
		list = append(list, keyView{ID: keyID(sha256.Sum256([]byte(k))), Label: "api_keys[" + strconv.Itoa(i) + "]", Prefix: &p, Source: "config"})
	}
	for i, h := range st.APIKeySHA256 {
		var sum [sha256.Size]byte
		hex.Decode(sum[:], []byte(h)) // validated at start-up
		list = append(list, keyView{ID: keyID(sum), Label: "api_key_sha256[" + strconv.Itoa(i) + "]", Source: "config"})
	}
	for i := range list {
		if at, ok := v.ConfigKeys[list[i].ID]; ok {
			list[i].CreatedAt = &at
		}
	}
	for _, k := range v.Keys {
		list = append(list, k.view())
	}
	for i := range list {
		if at, ok := v.LastUsed[list[i].ID]; ok {
			list[i].LastUsedAt = &at
		}
	}
	return list
}

func (k *merchantKey) view() keyView {
	p, at := k.Prefix, k.CreatedAt
	return keyView{ID: k.ID, Label: k.Label, Prefix: &p, Source: "merchant", CreatedAt: &at}
}

// prefixOf is the part of key that lists show.
func prefixOf(key string) string {
	n := 0
	for i := range key {
		if n == keyPrefixLen {
			return key[:i]
		}
		n++
	}
	return key
}

// newAPIKey returns a new key: "ak_" and 32 random bytes, base64url.
func newAPIKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return "ak_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// keysRoutes adds the routes of a store's API keys.
func (s *server) keysRoutes(mux *http.ServeMux) {
	for pattern, h := range map[string]func(http.ResponseWriter, *http.Request, *StoreConfig){
		"GET /stores/{store_id}/api-keys":             s.handleListKeys,
		"POST /stores/{store_id}/api-keys":            s.handleCreateKey,
		"DELETE /stores/{store_id}/api-keys/{key_id}": s.handleRevokeKey,
	} {
		mux.HandleFunc(pattern, s.bounded(s.withStore(h)))
	}
}

var (
	errNoKey      = &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no API key with that id in this store"}
	errConfigKey  = &apiError{Status: http.StatusConflict, Code: "key_from_config", Message: "this API key comes from the service's configuration file; whoever runs the service removes it there"}
	errTooManyKey = validationError([]fieldError{{"api_keys", "a store has at most " + strconv.Itoa(maxStoreKeys) + " API keys, those of the configuration file included; revoke one first"}})
)

func (s *server) handleListKeys(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	v, err := s.settingsOf(r.Context(), st)
	if err != nil {
		s.settingsFailed(w, st, err, false)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": listKeys(st, &v)})
}

// keyRequest is the body of a key's creation, which may have none.
type keyRequest struct {
	Label json.RawMessage `json:"label"`
}

func (s *server) handleCreateKey(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	if !s.changeable(w) {
		return
	}
	var req keyRequest
	if r.ContentLength != 0 && !readJSONObject(w, r, &req) {
		return
	}
	var label string
	var fields []fieldError
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if usable("label", req.Label, bad) {
		switch {
		case json.Unmarshal(req.Label, &label) != nil:
			bad("label", "must be a string")
		case utf8.RuneCountInString(label) > maxKeyLabel:
			bad("label", "is longer than "+strconv.Itoa(maxKeyLabel)+" characters")
		case hasControl(label):
			bad("label", "must not contain control characters")
		}
	}
	if len(fields) > 0 {
		writeError(w, validationError(fields))
		return
	}
	key := newAPIKey()
	sum := sha256.Sum256([]byte(key))
	var made merchantKey
	_, err := s.editSettings(r.Context(), st, func(v *storeSettings) error {
		if len(st.KeyHashes())+len(v.Keys) >= maxStoreKeys {
			return errTooManyKey
		}
		made = merchantKey{ID: keyID(sum), Label: label, Prefix: prefixOf(key),
			SHA256: hex.EncodeToString(sum[:]), CreatedAt: s.now().Unix(), Serial: v.NextSerial}
		v.Keys = append(v.Keys, made)
		v.NextSerial++
		return nil
	})
	if e := (*apiError)(nil); errors.As(err, &e) {
		writeError(w, e)
		return
	} else if err != nil {
		s.settingsFailed(w, st, err, true)
		return
	}
	s.log.Info("api keys: created", "store", st.ID, "field", "api_keys", "key_id", made.ID, "by_key_id", requestKeyID(r))
	view := made.view()
	view.Key = key
	writeJSON(w, http.StatusCreated, map[string]any{"data": view})
}

func (s *server) handleRevokeKey(w http.ResponseWriter, r *http.Request, st *StoreConfig) {
	id := r.PathValue("key_id")
	for _, h := range st.KeyHashes() {
		if keyID(h) == id {
			writeError(w, errConfigKey)
			return
		}
	}
	if !s.changeable(w) {
		return
	}
	_, err := s.editSettings(r.Context(), st, func(v *storeSettings) error {
		for i := range v.Keys {
			if v.Keys[i].ID == id {
				v.Keys = append(v.Keys[:i], v.Keys[i+1:]...)
				delete(v.LastUsed, id)
				return nil
			}
		}
		return errNoKey
	})
	if e := (*apiError)(nil); errors.As(err, &e) {
		writeError(w, e)
		return
	} else if err != nil {
		s.settingsFailed(w, st, err, true)
		return
	}
	s.log.Info("api keys: revoked", "store", st.ID, "field", "api_keys", "key_id", id, "by_key_id", requestKeyID(r))
	w.WriteHeader(http.StatusNoContent)
}
