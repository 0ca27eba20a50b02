package webhook

// Webhook signing (docs/receiving-webhooks.md). Every delivery attempt carries two
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

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"deeplink/internal/config"
)

const (
	SecretPrefix = "whsec_"

	// Header names. http.Header canonicalises the Standard Webhooks ones to
	// Webhook-Id etc. on the wire; HTTP header names are case-insensitive.
	HeaderSignature    = "X-Webhook-Signature"
	headerWebhookID    = "webhook-id"
	headerWebhookTime  = "webhook-timestamp"
	headerWebhookSig   = "webhook-signature"
	DefaultTolerance   = 5 * time.Minute
	secretRandomBytes  = 32
	hexSignatureLength = 2 * sha256.Size
)

// newSecret returns a fresh endpoint secret: "whsec_" + standard base64 of
// 32 bytes from crypto/rand.
func NewSecret() string {
	var b [secretRandomBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// webhookHeaders are the signature headers of one delivery attempt.
type webhookHeaders struct {
	Signature    string // X-Webhook-Signature: t=…,v1=…[,v1=…]
	ID           string // webhook-id: the event id, the same on every retry
	Timestamp    string // webhook-timestamp: unix seconds of this attempt
	StdSignature string // webhook-signature: v1,<base64>[ v1,<base64>]
}

// apply sets the headers on h.
func (w webhookHeaders) apply(h http.Header) {
	h.Set(HeaderSignature, w.Signature)
	h.Set(headerWebhookID, w.ID)
	h.Set(headerWebhookTime, w.Timestamp)
	h.Set(headerWebhookSig, w.StdSignature)
}

// signer signs deliveries for one endpoint: its current secret and, during a
// rotation grace, the previous one. It is safe for concurrent use and cheap
// per call (the HMAC states are pooled); keep one per endpoint and make a new
// one when the secrets change.
type signer struct {
	cur, old *secretKeys // old is nil outside a rotation grace
	pool     sync.Pool   // of *signState
}

// secretKeys are the two HMAC keys one secret gives.
type secretKeys struct {
	whole []byte // the whole "whsec_…" string: X-Webhook-Signature
	std   []byte // base64-decoded part after "whsec_": Standard Webhooks
}

// signState is the per-call scratch space: one HMAC per key and buffers, so
// that a call allocates only the header strings it returns.
type signState struct {
	curWhole, curStd, oldWhole, oldStd hash.Hash
	msg, out                           []byte // signed prefix; header being built
	sum                                [sha256.Size]byte
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

// newSigner returns a signer for secret and, when oldSecret is not empty,
// also for the previous secret during its rotation grace.
func newSigner(secret, oldSecret string) (*signer, error) {
	cur, err := parseSecret(secret)
	if err != nil {
		return nil, err
	}
	var old *secretKeys
	if oldSecret != "" {
		if old, err = parseSecret(oldSecret); err != nil {
			return nil, fmt.Errorf("previous secret: %w", err)
		}
	}
	return newSignerKeys(cur, old), nil
}

func newSignerKeys(cur, old *secretKeys) *signer {
	s := &signer{cur: cur, old: old}
	s.pool.New = func() any {
		st := &signState{
			curWhole: hmac.New(sha256.New, s.cur.whole),
			curStd:   hmac.New(sha256.New, s.cur.std),
			msg:      make([]byte, 0, 128),
			out:      make([]byte, 0, 256),
		}
		if s.old != nil {
			st.oldWhole = hmac.New(sha256.New, s.old.whole)
			st.oldStd = hmac.New(sha256.New, s.old.std)
		}
		return st
	}
	return s
}

// signDelivery returns the signature headers of one attempt at unix time
// t: what the sender calls. Signers are cached per (cur, old) pair, so
// repeated attempts cost only the strings. A secret that is not
// whsec_+base64 (never made by newSecret) still gets an
// X-Webhook-Signature; its Standard Webhooks key is then empty.
func SignDelivery(cur, old, id string, t int64, body []byte) webhookHeaders {
	return cachedSigner(cur, old).Sign(id, time.Unix(t, 0), body)
}

// signerCache maps a (cur, old) secret pair to its *signer. Entries hold
// secrets the service keeps in memory anyway; the cache is dropped whole when
// it grows past maxCachedSigners (rotations, deleted endpoints).
var (
	signerCache     sync.Map // signerCacheKey → *signer
	signerCacheSize atomic.Int64
)

type signerCacheKey struct{ cur, old string }

const maxCachedSigners = 4096

func cachedSigner(cur, old string) *signer {
	k := signerCacheKey{cur, old}
	if s, ok := signerCache.Load(k); ok {
		return s.(*signer)
	}
	s, err := newSigner(cur, old)
	if err != nil {
		c := lenientKeys(cur)
		if c == nil {
			c = &secretKeys{} // no secret at all: a useless signature, not a panic
		}
		s = newSignerKeys(c, lenientKeys(old))
	}
	if signerCacheSize.Add(1) > maxCachedSigners {
		signerCache.Clear()
		signerCacheSize.Store(1)
	}
	if prev, loaded := signerCache.LoadOrStore(k, s); loaded {
		return prev.(*signer)
	}
	return s
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

// sign returns the headers for one attempt to deliver body (the exact bytes
// sent) of event id at time t (truncated to whole unix seconds). Each attempt
// is signed afresh with its own time; id stays the same across retries.
func (s *signer) Sign(id string, t time.Time, body []byte) webhookHeaders {
	st := s.pool.Get().(*signState)
	defer s.pool.Put(st)

	// X-Webhook-Signature: t=<ts>,v1=<hex>[,v1=<hex>], signing "<ts>.<body>".
	msg := strconv.AppendInt(st.msg[:0], t.Unix(), 10)
	tsLen := len(msg)
	msg = append(msg, '.')
	out := append(st.out[:0], "t="...)
	out = append(out, msg[:tsLen]...)
	out = append(out, ",v1="...)
	out = hex.AppendEncode(out, st.mac(st.curWhole, msg, body))
	if st.oldWhole != nil {
		out = append(out, ",v1="...)
		out = hex.AppendEncode(out, st.mac(st.oldWhole, msg, body))
	}
	sig := string(out)
	ts := sig[2 : 2+tsLen] // shares sig's memory: no allocation

	// webhook-signature: v1,<base64>[ v1,<base64>], signing "<id>.<ts>.<body>".
	msg = append(msg[:0], id...)
	msg = append(msg, '.')
	msg = append(msg, ts...)
	msg = append(msg, '.')
	out = append(out[:0], "v1,"...)
	out = base64.StdEncoding.AppendEncode(out, st.mac(st.curStd, msg, body))
	if st.oldStd != nil {
		out = append(out, " v1,"...)
		out = base64.StdEncoding.AppendEncode(out, st.mac(st.oldStd, msg, body))
	}
	stdSig := string(out)

	st.msg, st.out = msg[:0], out[:0] // keep grown buffers for the next call
	return webhookHeaders{Signature: sig, ID: id, Timestamp: ts, StdSignature: stdSig}
}

// mac returns HMAC(prefix || body) under h, in a buffer valid until the next
// call.
func (st *signState) mac(h hash.Hash, prefix, body []byte) []byte {
	h.Reset()
	h.Write(prefix)
	h.Write(body)
	return h.Sum(st.sum[:0])
}

// Verification errors. verifySignature and verifyStandardWebhook return
// errors that wrap exactly one of these (test with errors.Is); their messages
// say what is wrong in a sentence fit for a person.
var (
	errMalformedHeader   = errors.New("malformed signature header")
	errNoV1Signature     = errors.New("no v1 signature")
	errOutsideTolerance  = errors.New("timestamp outside tolerance")
	ErrSignatureMismatch = errors.New("signature mismatch")
)

type verifyError struct {
	kind error
	msg  string
}

func (e *verifyError) Error() string { return e.msg }
func (e *verifyError) Unwrap() error { return e.kind }

func verifyErrorf(kind error, format string, args ...any) error {
	return &verifyError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// signatureHeader is a parsed X-Webhook-Signature.
type signatureHeader struct {
	Timestamp int64    // t=, unix seconds
	V1        []string // every v1= value, in order: 64 hex digits each
}

// parseSignatureHeader parses "t=<unix>,v1=<hex>[,v1=<hex>…]".
//
// Parts are comma-separated key=value pairs in any order; spaces and tabs
// around parts, keys and values are ignored. t must appear exactly once, as
// decimal digits; every v1 must be 64 hex digits (either case). Parts with
// other keys (v0=, a future v2=) are ignored, whatever their value. Anything
// else (an empty part, a part without '=', an empty key) is malformed.
// A header that is well formed but has no v1 yields errNoV1Signature.
func ParseSignatureHeader(header string) (signatureHeader, error) {
	var h signatureHeader
	if strings.TrimSpace(header) == "" {
		return h, verifyErrorf(errMalformedHeader, "malformed signature header: empty")
	}
	seenT := false
	rest := header
	for n := 1; ; n++ {
		part, more, found := strings.Cut(rest, ",")
		rest = more
		part = strings.Trim(part, " \t")
		key, val, ok := strings.Cut(part, "=")
		key, val = strings.Trim(key, " \t"), strings.Trim(val, " \t")
		switch {
		case part == "":
			return h, verifyErrorf(errMalformedHeader, "malformed signature header: part %d is empty", n)
		case !ok || key == "":
			return h, verifyErrorf(errMalformedHeader, "malformed signature header: part %d is not key=value", n)
		case key == "t":
			if seenT {
				return h, verifyErrorf(errMalformedHeader, "malformed signature header: t= appears twice")
			}
			seenT = true
			ts, err := strconv.ParseInt(val, 10, 64)
			if err != nil || !allDigits(val) {
				return h, verifyErrorf(errMalformedHeader, "malformed signature header: t= is not a unix time in seconds")
			}
			h.Timestamp = ts
		case key == "v1":
			if len(val) != hexSignatureLength || !isHexString(val) {
				return h, verifyErrorf(errMalformedHeader, "malformed signature header: v1= is not %d hex digits", hexSignatureLength)
			}
			h.V1 = append(h.V1, val)
		}
		if !found {
			break
		}
	}
	if !seenT {
		return h, verifyErrorf(errMalformedHeader, "malformed signature header: no t=")
	}
	if len(h.V1) == 0 {
		return h, verifyErrorf(errNoV1Signature, "no v1 signature in header")
	}
	return h, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isHexString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !config.IsHex(s[i]) {
			return false
		}
	}
	return true
}

// verifySignature checks an X-Webhook-Signature header against secret (the
// whole "whsec_…" string is the HMAC key) and the raw body, as a merchant
// would. It accepts when any v1 matches (two during a rotation grace),
// comparing in constant time.
//
// The signature is checked first, so a timestamp error means an authentic but
// stale (or replayed, or clock-skewed) delivery. The time check allows
// |now - t| ≤ tolerance in whole seconds, in both directions; a tolerance ≤ 0
// disables it (for re-checking an old delivery from the log, say). Callers
// that want the usual check pass defaultTolerance (5 minutes).
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return errors.New("empty secret")
	}
	h, err := ParseSignatureHeader(header)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, []byte(secret))
	var prefix [24]byte
	mac.Write(strconv.AppendInt(prefix[:0], h.Timestamp, 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	matched := false
	var got [sha256.Size]byte
	for _, v := range h.V1 {
		hex.Decode(got[:], []byte(v)) // validated by the parser
		if hmac.Equal(got[:], want) {
			matched = true // no early exit: the time taken says nothing about which matched
		}
	}
	if !matched {
		if len(h.V1) == 1 {
			return verifyErrorf(ErrSignatureMismatch, "signature mismatch: the v1 signature does not match this secret and body")
		}
		return verifyErrorf(ErrSignatureMismatch, "signature mismatch: none of the %d v1 signatures matches this secret and body", len(h.V1))
	}
	return checkTolerance(h.Timestamp, now, tolerance)
}

// checkTolerance returns errOutsideTolerance when t (unix seconds) is more
// than tolerance away from now in either direction; tolerance ≤ 0 disables it.
func checkTolerance(t int64, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		return nil
	}
	age := now.Unix() - t // both ≥ 0 in practice, so this cannot overflow
	tol := int64(tolerance / time.Second)
	switch {
	case age > tol:
		return verifyErrorf(errOutsideTolerance, "timestamp is %s old, tolerance %s", SecondsString(age), tolerance)
	case -age > tol:
		return verifyErrorf(errOutsideTolerance, "timestamp is %s in the future, tolerance %s", SecondsString(-age), tolerance)
	}
	return nil
}

// secondsString formats n seconds as a duration, saturating far beyond any
// plausible clock difference.
func SecondsString(n int64) string {
	const maxSeconds = int64(1<<63-1) / int64(time.Second)
	if n > maxSeconds || n < -maxSeconds {
		return "more than 290 years"
	}
	return (time.Duration(n) * time.Second).String()
}
