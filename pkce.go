package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// PKCE with the S256 method (RFC 7636).

// newVerifier returns a fresh code_verifier: 32 random bytes as 43
// characters of base64url.
func newVerifier() string { return randomToken() }

// randomToken returns 32 bytes from crypto/rand as 43 characters of
// base64url: a code_verifier, a state, an access token.
func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// s256 returns the S256 code_challenge of verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// verifyS256 reports, in constant time, whether verifier hashes to challenge.
func verifyS256(verifier, challenge string) bool {
	return subtle.ConstantTimeCompare([]byte(s256(verifier)), []byte(challenge)) == 1
}

// isCodeChallenge reports whether s has the form of an S256 challenge:
// exactly 43 characters of base64url without padding.
func isCodeChallenge(s string) bool {
	if len(s) != 43 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}

// isCodeVerifier reports whether s is a valid code_verifier: 43 to 128
// unreserved characters (RFC 7636 §4.1).
func isCodeVerifier(s string) bool {
	return len(s) >= 43 && len(s) <= 128 && isUnreserved(s)
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// isUnreserved reports whether s consists of A-Z a-z 0-9 - . _ ~ only.
func isUnreserved(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isBase64URL(c) && c != '.' && c != '~' {
			return false
		}
	}
	return true
}
