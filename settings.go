package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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
// created_at), and returns a warning for each field the file now gives
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
			if demo && v.GameAuthorizeURL != st.GameAuthorizeURL && strings.HasSuffix(v.GameAuthorizeURL, demoGamePath) {
				v.GameAuthorizeURL, changed = st.GameAuthorizeURL, true
			}
			if v.Name != st.Name {
				differ = append(differ, "name")
			}
			if v.GameAuthorizeURL != st.GameAuthorizeURL {
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
