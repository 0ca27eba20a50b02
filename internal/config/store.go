package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// StoreConfig is one entry of "stores".
type StoreConfig struct {
	ID               string   `json:"id"`
	Name             string   `json:"name"`
	APIKeys          []string `json:"api_keys"`
	APIKeySHA256     []string `json:"api_key_sha256"`
	RedirectDomains  []string `json:"redirect_domains"`
	GameAuthorizeURL string   `json:"game_authorize_url"`

	keyHashes [][sha256.Size]byte // every accepted key, hashed
}

func (s *StoreConfig) validate() error {
	if s == nil {
		return errors.New("id: store must be an object")
	}
	if !IsUUID(s.ID) {
		return fmt.Errorf("id: %q is not a UUID", s.ID)
	}
	for i, k := range s.APIKeys {
		if k == "" {
			return fmt.Errorf("api_keys[%d]: must not be empty", i)
		}
		// Neither could ever arrive in X-API-Key: HTTP trims the one and
		// refuses the other (a tab within is allowed, as a space is). The
		// key itself is not told.
		if k != strings.Trim(k, " \t") || strings.ContainsFunc(k, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			return fmt.Errorf("api_keys[%d]: must have no control characters and no space at either end", i)
		}
		s.keyHashes = append(s.keyHashes, sha256.Sum256([]byte(k)))
	}
	for i, h := range s.APIKeySHA256 {
		var sum [sha256.Size]byte
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("api_key_sha256[%d]: must be 64 hex digits", i)
		} else {
			copy(sum[:], b)
		}
		s.keyHashes = append(s.keyHashes, sum)
	}
	if len(s.keyHashes) == 0 {
		return errors.New("api_keys: a store needs at least one key in api_keys or api_key_sha256")
	}
	for i, d := range s.RedirectDomains {
		bare := strings.TrimPrefix(d, "*.")
		if !IsHostname(bare) {
			return fmt.Errorf("redirect_domains[%d]: %q is not a host name or *.domain", i, d)
		}
		s.RedirectDomains[i] = strings.ToLower(d)
	}
	if s.GameAuthorizeURL != "" {
		// A custom scheme (game://authorize) may have no host; http(s)
		// must, and no URL here may carry userinfo.
		u, err := url.Parse(s.GameAuthorizeURL)
		web := u != nil && (u.Scheme == "https" || u.Scheme == "http")
		if err != nil || u.Scheme == "" || u.Fragment != "" || u.User != nil || web && u.Hostname() == "" {
			return fmt.Errorf("game_authorize_url: %q must be an absolute URL, with a host if http(s), and no userinfo or fragment", s.GameAuthorizeURL)
		}
		if ForbiddenScheme(u.Scheme) {
			return fmt.Errorf("game_authorize_url: a %s: URL can never open a game app", strings.ToLower(u.Scheme))
		}
	}
	return nil
}

// ForbiddenScheme reports whether scheme (any case) is one a Game
// Authorize URL may never have: it would run or show something in the
// browser instead of opening a game app (javascript, data, vbscript,
// blob), or read the player's files (file).
func ForbiddenScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "javascript", "data", "file", "blob", "vbscript":
		return true
	}
	return false
}

// Store returns the configured store whose id is id, or nil. UUIDs are
// compared ignoring case (RFC 9562 §4: uuidgen on macOS prints capitals),
// in the configuration and in URLs alike. A store keeps its ID as the file
// writes it: its codes and sessions are keyed by it, as before ids were
// compared so, and answers show it as configured. (The webhook state is
// brought to that spelling at load: hooks.load.)
func (c *Config) Store(id string) *StoreConfig {
	if st, ok := c.stores[id]; ok { // the usual, lower-case spelling: one lookup
		return st
	}
	return c.stores[strings.ToLower(id)]
}

// IsUUID reports whether s has the 8-4-4-4-12 hex form of a UUID.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !IsHex(c) {
				return false
			}
		}
	}
	return true
}

func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// IsHostname reports whether s is an ASCII host name of letters, digits,
// hyphens and dots, without empty labels or a trailing dot.
func IsHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for more := true; more; { // label by label, without allocating a slice of them
		var label string
		label, s, more = strings.Cut(s, ".")
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// KeyHashes returns the SHA-256 of every key the store accepts, those of
// api_keys and those of api_key_sha256.
func (s *StoreConfig) KeyHashes() [][sha256.Size]byte { return s.keyHashes }

// AllowsHost reports whether host (lower case) is one of the store's
// redirect domains: an exact entry, or a proper subdomain of a *.entry.
func (st *StoreConfig) AllowsHost(host string) bool {
	for _, d := range st.RedirectDomains {
		if parent, ok := strings.CutPrefix(d, "*."); ok {
			if strings.HasSuffix(host, "."+parent) && len(host) > len(parent)+1 {
				return true
			}
		} else if host == d {
			return true
		}
	}
	return false
}
