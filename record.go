package main

import (
	"crypto/sha256"
	"encoding/binary"
)

// Values kept in the Store, in a compact binary form: a kind byte, then
// length-prefixed strings. Compactness matters: a million live codes must
// fit in half a GiB.
const (
	kindCode       = 'c' // a registered, unredeemed auth code
	kindRedeemed   = 'r' // a code that was redeemed once; holds the key of the token it issued
	kindReplayed   = 'x' // a code that was replayed; holds the key of the token it revokes
	kindSession    = 's' // an access token's session
	playerFields   = 7
	keySeparator   = 0
	tokenKeyLabel  = "token"
	replayKeyLabel = "redeemed"
)

// Player is what the game app told us about the player, as returned by the
// token and me endpoints. Every field is always present, empty when unknown.
type Player struct {
	ClientReferenceID string `json:"client_reference_id"`
	FirstName         string `json:"first_name"`
	LastName          string `json:"last_name"`
	Language          string `json:"language"`
	Currency          string `json:"currency"`
	Country           string `json:"country"`
	Timezone          string `json:"timezone"`
}

func (p *Player) fields() [playerFields]*string {
	return [...]*string{&p.ClientReferenceID, &p.FirstName, &p.LastName, &p.Language, &p.Currency, &p.Country, &p.Timezone}
}

// append appends p's fields, length-prefixed, to b.
func (p *Player) append(b []byte) []byte {
	for _, f := range p.fields() {
		b = appendStr(b, *f)
	}
	return b
}

// read fills p from r, as written by append.
func (p *Player) read(r *reader) {
	for _, f := range p.fields() {
		*f = r.str()
	}
}

// codeRecord is a registered auth code: what its redemption must match and
// the player it signs in.
type codeRecord struct {
	RedirectURI   string
	CodeChallenge string
	Player        Player
}

// sessionRecord is the state behind an access token.
type sessionRecord struct {
	StoreID string
	Player  Player
}

// Key names an entry of the sign-in state. It is always a SHA-256 of what
// it stands for (an auth code with its store, an access token), never the
// secret itself, so a leaked journal or snapshot reveals no live code or
// token.
type Key [32]byte

// keyPrefix starts the store keys of the sign-in state.
const keyPrefix = "auth:"

// name is k's key in the store.
func (k Key) name() string { return keyPrefix + string(k[:]) }

// codeKey is where the code of a store is kept: a hash, so neither memory
// dumps nor snapshots hold a redeemable code.
func codeKey(storeID, code string) Key {
	var buf [36 + 1 + 255]byte
	b := append(buf[:0], storeID...)
	b = append(b, keySeparator)
	b = append(b, code...)
	return sha256.Sum256(b)
}

// replayKey is where a code that signed someone in names its token once
// the code's own entry is gone (with auth_code_ttl), as long as the token
// lives: a replay of the code then still finds the token to revoke. Store
// ids are UUIDs, so neither this key nor tokenKey's can be a codeKey.
func replayKey(storeID, code string) Key {
	var buf [len(replayKeyLabel) + 1 + 36 + 1 + 255]byte
	b := append(buf[:0], replayKeyLabel...)
	b = append(b, keySeparator)
	b = append(b, storeID...)
	b = append(b, keySeparator)
	b = append(b, code...)
	return sha256.Sum256(b)
}

// tokenKey is where the session of an access token is kept.
func tokenKey(token string) Key {
	return sha256.Sum256([]byte(tokenKeyLabel + string(rune(keySeparator)) + token))
}

// appendTo appends c, encoded, to b.
func (c *codeRecord) appendTo(b []byte) []byte {
	b = append(b, kindCode)
	b = appendStr(b, c.RedirectURI)
	b = appendStr(b, c.CodeChallenge)
	return c.Player.append(b)
}

func decodeCode(b []byte) (c codeRecord, ok bool) {
	if len(b) == 0 || b[0] != kindCode {
		return c, false
	}
	r := reader{b: b[1:]}
	c.RedirectURI = r.str()
	c.CodeChallenge = r.str()
	c.Player.read(&r)
	return c, r.ok()
}

// redeemedValue marks a code as used, naming the token it issued so a
// replay can revoke it.
func redeemedValue(tok Key) []byte { return append([]byte{kindRedeemed}, tok[:]...) }

// replayedValue marks a code as replayed: the token it names is revoked,
// or being revoked. It keeps naming the token, so that a replay cut off
// between this mark and the revocation is finished by the next one.
func replayedValue(tok Key) []byte { return append([]byte{kindReplayed}, tok[:]...) }

// decodeMarker reads a redeemed or replayed mark.
func decodeMarker(b []byte) (tok Key, replayed, ok bool) {
	if len(b) != 1+len(tok) || b[0] != kindRedeemed && b[0] != kindReplayed {
		return tok, false, false
	}
	copy(tok[:], b[1:])
	return tok, b[0] == kindReplayed, true
}

func (s *sessionRecord) encode() []byte {
	b := []byte{kindSession}
	b = appendStr(b, s.StoreID)
	return s.Player.append(b)
}

func decodeSession(b []byte) (s sessionRecord, ok bool) {
	if len(b) == 0 || b[0] != kindSession {
		return s, false
	}
	r := reader{b: b[1:]}
	s.StoreID = r.str()
	s.Player.read(&r)
	return s, r.ok()
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// reader reads length-prefixed strings; a short or damaged input sets bad
// and yields empty strings from then on.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) str() string {
	l, n := binary.Uvarint(r.b)
	if r.bad || n <= 0 || l > uint64(len(r.b)-n) {
		r.bad = true
		return ""
	}
	s := string(r.b[n : n+int(l)])
	r.b = r.b[n+int(l):]
	return s
}

// ok reports whether everything read was well formed and nothing is left.
func (r *reader) ok() bool { return !r.bad && len(r.b) == 0 }
