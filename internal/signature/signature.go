// Package signature signs webhook deliveries and verifies their signatures
// (docs/receiving-webhooks.md). Every delivery attempt carries two
// signatures made with the same endpoint secret:
//
//   - X-Webhook-Signature: t=<unix>,v1=<hex HMAC-SHA256(key = the whole
//     secret string "whsec_…" as bytes, msg = "<t>.<raw body>")>, and during a
//     rotation grace a second ",v1=<hex>" made with the previous secret;
//   - the Standard Webhooks headers webhook-id, webhook-timestamp and
//     webhook-signature: "v1,<base64 HMAC-SHA256(key = base64-decoded part
//     after "whsec_", msg = "<id>.<t>.<raw body>")>", space-separated when
//     there are two secrets.
//
// Secrets are "whsec_" + standard base64 of 32 random bytes, so one secret
// serves both schemes.
package signature

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
)

const (
	SecretPrefix = "whsec_"

	// Header names. http.Header canonicalises the Standard Webhooks ones to
	// Webhook-Id etc. on the wire; HTTP header names are case-insensitive.
	HeaderName        = "X-Webhook-Signature"
	headerWebhookID   = "webhook-id"
	headerWebhookTime = "webhook-timestamp"
	headerWebhookSig  = "webhook-signature"
	secretRandomBytes = 32
)

// NewSecret returns a fresh endpoint secret: "whsec_" + standard base64 of
// 32 bytes from crypto/rand.
func NewSecret() string {
	var b [secretRandomBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// Headers are the signature headers of one delivery attempt.
type Headers struct {
	Signature    string // X-Webhook-Signature: t=…,v1=…[,v1=…]
	ID           string // webhook-id: the event id, the same on every retry
	Timestamp    string // webhook-timestamp: unix seconds of this attempt
	StdSignature string // webhook-signature: v1,<base64>[ v1,<base64>]
}

// Apply sets the headers on h.
func (w Headers) Apply(h http.Header) {
	h.Set(HeaderName, w.Signature)
	h.Set(headerWebhookID, w.ID)
	h.Set(headerWebhookTime, w.Timestamp)
	h.Set(headerWebhookSig, w.StdSignature)
}

// secretKeys are the two HMAC keys one secret gives.
type secretKeys struct {
	whole []byte // the whole "whsec_…" string: X-Webhook-Signature
	std   []byte // base64-decoded part after "whsec_": Standard Webhooks
}

// errBadSecret is returned for a secret that is not "whsec_" + base64.
var errBadSecret = errors.New("webhook secret must be whsec_ followed by standard base64")

func parseSecret(secret string) (*secretKeys, error) {
	// Like the Standard Webhooks reference libraries, the prefix is optional
	// for the decoded key; the X-Webhook-Signature key is the string as given.
	b64 := strings.TrimPrefix(secret, SecretPrefix)
	if b64 == "" {
		return nil, errBadSecret
	}
	std, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(std) == 0 {
		return nil, errBadSecret
	}
	return &secretKeys{whole: []byte(secret), std: std}, nil
}

// lenientKeys is parseSecret that never fails: nil for "", and an empty
// Standard Webhooks key for a secret that does not decode.
func lenientKeys(secret string) *secretKeys {
	if secret == "" {
		return nil
	}
	if k, err := parseSecret(secret); err == nil {
		return k
	}
	return &secretKeys{whole: []byte(secret), std: []byte{}}
}
