package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far from now Verify usually lets a signature's
// time be.
const DefaultTolerance = 5 * time.Minute

const hexSignatureLength = 2 * sha256.Size

// Verification errors. Verify returns errors that wrap exactly one of
// these (test with errors.Is); their messages say what is wrong in a
// sentence fit for a person.
var (
	errMalformedHeader  = errors.New("malformed signature header")
	errNoV1Signature    = errors.New("no v1 signature")
	errOutsideTolerance = errors.New("timestamp outside tolerance")
	ErrMismatch         = errors.New("signature mismatch")
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

// Parsed is an X-Webhook-Signature header, parsed.
type Parsed struct {
	Timestamp int64    // t=, unix seconds
	V1        []string // every v1= value, in order: 64 hex digits each
}

// Parse parses an X-Webhook-Signature header, "t=<unix>,v1=<hex>[,v1=<hex>…]".
//
// Parts are comma-separated key=value pairs in any order; spaces and tabs
// around parts, keys and values are ignored. t must appear exactly once, as
// decimal digits; every v1 must be 64 hex digits (either case). Parts with
// other keys (v0=, a future v2=) are ignored, whatever their value. Anything
// else (an empty part, a part without '=', an empty key) is malformed.
// A header that is well formed but has no v1 yields errNoV1Signature.
func Parse(header string) (Parsed, error) {
	var h Parsed
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
			if err != nil || !isDigits(val) {
				return h, verifyErrorf(errMalformedHeader, "malformed signature header: t= is not a unix time in seconds")
			}
			h.Timestamp = ts
		case key == "v1":
			if len(val) != hexSignatureLength || strings.Trim(val, "0123456789abcdefABCDEF") != "" {
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

// isDigits reports whether s is one or more decimal digits.
func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// Verify checks an X-Webhook-Signature header against secret (the whole
// "whsec_…" string is the HMAC key) and the raw body, as a merchant would.
// It accepts when any v1 matches (two during a rotation grace), comparing
// in constant time.
//
// The signature is checked first, so a timestamp error means an authentic but
// stale (or replayed, or clock-skewed) delivery. The time check allows
// |now - t| ≤ tolerance in whole seconds, in both directions; a tolerance ≤ 0
// disables it (for re-checking an old delivery from the log, say). Callers
// that want the usual check pass DefaultTolerance.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if secret == "" {
		return errors.New("empty secret")
	}
	h, err := Parse(header)
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
			return verifyErrorf(ErrMismatch, "signature mismatch: the v1 signature does not match this secret and body")
		}
		return verifyErrorf(ErrMismatch, "signature mismatch: none of the %d v1 signatures matches this secret and body", len(h.V1))
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
		return verifyErrorf(errOutsideTolerance, "timestamp is %s old, tolerance %s", FormatSeconds(age), tolerance)
	case -age > tol:
		return verifyErrorf(errOutsideTolerance, "timestamp is %s in the future, tolerance %s", FormatSeconds(-age), tolerance)
	}
	return nil
}

// FormatSeconds formats n seconds as a duration, saturating far beyond any
// plausible clock difference.
func FormatSeconds(n int64) string {
	const maxSeconds = int64(1<<63-1) / int64(time.Second)
	if n > maxSeconds || n < -maxSeconds {
		return "more than 290 years"
	}
	return (time.Duration(n) * time.Second).String()
}
