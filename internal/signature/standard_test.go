package signature

// A verifier of the Standard Webhooks headers, for the tests: the service
// signs through Sign and checks nothing itself.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// verifyStandardWebhook checks the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature) in h against secret and the raw body:
// the HMAC key is the base64-decoded part after "whsec_", the signed content
// "<id>.<timestamp>.<body>", and any "v1,<base64>" among the space-separated
// signatures may match; other versions are ignored. Tolerance as in
// Verify.
func verifyStandardWebhook(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	keys, err := parseSecret(secret)
	if err != nil {
		return err
	}
	id, ts, sigs := h.Get(headerWebhookID), h.Get(headerWebhookTime), h.Get(headerWebhookSig)
	if id == "" || ts == "" || sigs == "" {
		return verifyErrorf(errMalformedHeader, "malformed Standard Webhooks headers: webhook-id, webhook-timestamp and webhook-signature are all required")
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || !isDigits(ts) {
		return verifyErrorf(errMalformedHeader, "malformed Standard Webhooks headers: webhook-timestamp is not a unix time in seconds")
	}
	mac := hmac.New(sha256.New, keys.std)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	found, matched := false, false
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		found = true
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !found {
		return verifyErrorf(errNoV1Signature, "no v1 signature in webhook-signature")
	}
	if !matched {
		return verifyErrorf(ErrMismatch, "signature mismatch: no v1 signature in webhook-signature matches this secret and body")
	}
	return checkTolerance(t, now, tolerance)
}
