package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// webhookTestVector is testdata/webhook_test_vector.json. Its expected values
// were computed with Python's hmac/hashlib (and checked with openssl), not
// with this package, so they pin the scheme independently of the signer.
type webhookTestVector struct {
	Secret                     string `json:"secret"`
	Timestamp                  int64  `json:"timestamp"`
	ID                         string `json:"id"`
	Body                       string `json:"body"`
	ExpectedXWebhookSignature  string `json:"expected_x_webhook_signature"`
	ExpectedWebhookSignature   string `json:"expected_webhook_signature"`
	OldSecret                  string `json:"old_secret"`
	ExpectedXWebhookSigRotated string `json:"expected_x_webhook_signature_rotation"`
	ExpectedWebhookSigRotated  string `json:"expected_webhook_signature_rotation"`
}

func loadTestVector(t testing.TB) webhookTestVector {
	t.Helper()
	b, err := os.ReadFile("../../testdata/webhook_test_vector.json")
	if err != nil {
		t.Fatal(err)
	}
	var v webhookTestVector
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// mustSigner is a signer for secret and, when old is not empty, the
// previous secret; both must be whsec_+base64.
func mustSigner(t testing.TB, secret, old string) *signer {
	t.Helper()
	cur, err := parseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	var prev *secretKeys
	if old != "" {
		if prev, err = parseSecret(old); err != nil {
			t.Fatal(err)
		}
	}
	return newSigner(cur, prev)
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		s := NewSecret()
		if !strings.HasPrefix(s, "whsec_") {
			t.Fatalf("%q lacks whsec_", s)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(raw) != 32 {
			t.Fatalf("%q: decoded %d bytes, err %v; want 32 bytes", s, len(raw), err)
		}
		if seen[s] {
			t.Fatalf("secret %q repeated", s)
		}
		seen[s] = true
		if _, err := parseSecret(s); err != nil {
			t.Fatalf("parseSecret(%q) = %v; want nil", s, err)
		}
	}
}

func TestSignerMatchesTestVector(t *testing.T) {
	v := loadTestVector(t)
	at := time.Unix(v.Timestamp, 0)
	tests := []struct {
		name, old, wantX, wantStd string
	}{
		{"one secret", "", v.ExpectedXWebhookSignature, v.ExpectedWebhookSignature},
		{"rotation grace", v.OldSecret, v.ExpectedXWebhookSigRotated, v.ExpectedWebhookSigRotated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := mustSigner(t, v.Secret, tc.old).sign(v.ID, at, []byte(v.Body))
			want := Headers{Signature: tc.wantX, ID: v.ID, Timestamp: strconv.FormatInt(v.Timestamp, 10), StdSignature: tc.wantStd}
			if h != want {
				t.Errorf("sign:\n got %+v\nwant %+v", h, want)
			}
			// And the verifiers accept the vector as a merchant would receive it.
			now := at.Add(3 * time.Second)
			if err := Verify(v.Secret, tc.wantX, []byte(v.Body), now, DefaultTolerance); err != nil {
				t.Errorf("Verify: %v", err)
			}
			hdr := http.Header{}
			want.Apply(hdr)
			if err := verifyStandardWebhook(v.Secret, hdr, []byte(v.Body), now, DefaultTolerance); err != nil {
				t.Errorf("verifyStandardWebhook: %v", err)
			}
		})
	}
}

// The Standard Webhooks reference libraries' own published vector: a
// consumer using one of them must accept what we send.
func TestStandardWebhooksPublishedVector(t *testing.T) {
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = 1614265330
		body   = `{"test": 2432232314}`
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	h := mustSigner(t, secret, "").sign(id, time.Unix(ts, 0), []byte(body))
	if h.StdSignature != want {
		t.Errorf("webhook-signature = %q, want %q", h.StdSignature, want)
	}
	hdr := http.Header{}
	hdr.Set("webhook-id", id)
	hdr.Set("webhook-timestamp", strconv.Itoa(ts))
	hdr.Set("webhook-signature", "v1a,ignored v1,bm9wZQ== "+want) // other versions and a wrong v1 alongside
	if err := verifyStandardWebhook(secret, hdr, []byte(body), time.Unix(ts, 0), DefaultTolerance); err != nil {
		t.Errorf("verifyStandardWebhook: %v", err)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	secret := NewSecret()
	s := mustSigner(t, secret, "")
	now := time.Unix(1_700_000_000, 999_000_000)
	bodies := []struct {
		name string
		body []byte
	}{
		{"envelope", []byte(`{"id":"evt_1","type":"webhook.test","created_at":1700000000,"data":{"object":{}}}`)},
		{"empty", nil},
		{"unicode", []byte(`{"name":"Zoë 東京 🎮"}`)},
		{"binary and newlines", []byte("a\x00b\r\n\xff")},
		{"large", []byte(strings.Repeat("x", 1<<16))},
	}
	for _, tc := range bodies {
		t.Run(tc.name, func(t *testing.T) {
			h := s.sign("evt_1", now, tc.body)
			if want := "t=1700000000,v1="; !strings.HasPrefix(h.Signature, want) || len(h.Signature) != len(want)+64 {
				t.Errorf("X-Webhook-Signature %q: want %s<64 hex>", h.Signature, want)
			}
			if h.ID != "evt_1" || h.Timestamp != "1700000000" {
				t.Errorf("webhook-id %q, webhook-timestamp %q", h.ID, h.Timestamp)
			}
			if err := Verify(secret, h.Signature, tc.body, now, DefaultTolerance); err != nil {
				t.Errorf("Verify: %v", err)
			}
			hdr := http.Header{}
			h.Apply(hdr)
			if err := verifyStandardWebhook(secret, hdr, tc.body, now, DefaultTolerance); err != nil {
				t.Errorf("verifyStandardWebhook: %v", err)
			}
			// An independent computation of both signatures.
			m := hmac.New(sha256.New, []byte(secret))
			fmt.Fprintf(m, "%d.%s", now.Unix(), tc.body)
			if want := "t=1700000000,v1=" + hex.EncodeToString(m.Sum(nil)); h.Signature != want {
				t.Errorf("X-Webhook-Signature = %q, want %q", h.Signature, want)
			}
			key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
			m = hmac.New(sha256.New, key)
			fmt.Fprintf(m, "evt_1.%d.%s", now.Unix(), tc.body)
			if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); h.StdSignature != want {
				t.Errorf("webhook-signature = %q, want %q", h.StdSignature, want)
			}
		})
	}
}

func TestRotationBothSecretsVerify(t *testing.T) {
	cur, old, other := NewSecret(), NewSecret(), NewSecret()
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":"evt_2"}`)
	h := mustSigner(t, cur, old).sign("evt_2", now, body)
	if n := strings.Count(h.Signature, ",v1="); n != 2 {
		t.Fatalf("X-Webhook-Signature %q has %d v1 values, want 2", h.Signature, n)
	}
	if n := len(strings.Fields(h.StdSignature)); n != 2 {
		t.Fatalf("webhook-signature %q has %d signatures, want 2", h.StdSignature, n)
	}
	// The current signature comes first in both headers, and matches what the
	// current secret alone gives.
	alone := mustSigner(t, cur, "").sign("evt_2", now, body)
	if !strings.HasPrefix(h.Signature, alone.Signature+",v1=") || !strings.HasPrefix(h.StdSignature, alone.StdSignature+" v1,") {
		t.Errorf("rotation headers %+v do not start with the current secret's %+v", h, alone)
	}
	hdr := http.Header{}
	h.Apply(hdr)
	for _, tc := range []struct {
		name    string
		secret  string
		wantErr error
	}{
		{"current secret", cur, nil},
		{"previous secret", old, nil},
		{"unrelated secret", other, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Verify(tc.secret, h.Signature, body, now, DefaultTolerance); !errors.Is(err, tc.wantErr) {
				t.Errorf("Verify = %v, want %v", err, tc.wantErr)
			}
			if err := verifyStandardWebhook(tc.secret, hdr, body, now, DefaultTolerance); !errors.Is(err, tc.wantErr) {
				t.Errorf("verifyStandardWebhook = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestParseSecretRejectsBadSecrets(t *testing.T) {
	for _, secret := range []string{"", "whsec_", "whsec_not*base64!", "whsec_%%%"} {
		if _, err := parseSecret(secret); !errors.Is(err, errBadSecret) {
			t.Errorf("parseSecret(%q) = %v; want %v", secret, err, errBadSecret)
		}
	}
}

// sigFor is an independently computed v1 value for the X-Webhook-Signature scheme.
func sigFor(secret string, ts int64, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.%s", ts, body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestVerifySignatureErrors(t *testing.T) {
	secret := NewSecret()
	const ts = 1_700_000_000
	now := time.Unix(ts+10, 0)
	body := `{"id":"evt_3","status":"completed"}`
	good := sigFor(secret, ts, body)
	tests := []struct {
		name    string
		secret  string
		header  string
		body    string
		wantErr error
		wantMsg string // a substring of the message
	}{
		{"valid", secret, "t=1700000000,v1=" + good, body, nil, ""},
		{"tampered body", secret, "t=1700000000,v1=" + good, body + " ", ErrMismatch, "does not match"},
		{"re-serialised body", secret, "t=1700000000,v1=" + good, `{"id": "evt_3", "status": "completed"}`, ErrMismatch, ""},
		{"wrong secret", NewSecret(), "t=1700000000,v1=" + good, body, ErrMismatch, ""},
		{"secret without prefix", strings.TrimPrefix(secret, "whsec_"), "t=1700000000,v1=" + good, body, ErrMismatch, ""},
		{"tampered timestamp", secret, "t=1700000001,v1=" + good, body, ErrMismatch, ""},
		{"tampered signature", secret, "t=1700000000,v1=" + strings.Repeat("0", 64), body, ErrMismatch, ""},
		{"two wrong signatures", secret, "t=1700000000,v1=" + strings.Repeat("0", 64) + ",v1=" + strings.Repeat("1", 64), body, ErrMismatch, "none of the 2"},
		{"stale but authentic", secret, fmt.Sprintf("t=%d,v1=%s", ts-420, sigFor(secret, ts-420, body)), body, errOutsideTolerance, "timestamp is 7m10s old, tolerance 5m0s"},
		{"stale and forged", secret, fmt.Sprintf("t=%d,v1=%s", ts-420, good), body, ErrMismatch, ""},
		{"from the future", secret, fmt.Sprintf("t=%d,v1=%s", ts+400, sigFor(secret, ts+400, body)), body, errOutsideTolerance, "timestamp is 6m30s in the future, tolerance 5m0s"},
		{"empty header", secret, "", body, errMalformedHeader, "empty"},
		{"blank header", secret, "  \t ", body, errMalformedHeader, ""},
		{"only v0", secret, "t=1700000000,v0=abc", body, errNoV1Signature, "no v1 signature"},
		{"no v1 at all", secret, "t=1700000000", body, errNoV1Signature, ""},
		{"no t", secret, "v1=" + good, body, errMalformedHeader, "no t="},
		{"t twice", secret, "t=1700000000,t=1700000000,v1=" + good, body, errMalformedHeader, "twice"},
		{"t not a number", secret, "t=17e8,v1=" + good, body, errMalformedHeader, "unix time"},
		{"negative t", secret, "t=-1,v1=" + good, body, errMalformedHeader, ""},
		{"signed t", secret, "t=+1700000000,v1=" + good, body, errMalformedHeader, ""},
		{"t overflows", secret, "t=99999999999999999999,v1=" + good, body, errMalformedHeader, ""},
		{"empty t", secret, "t=,v1=" + good, body, errMalformedHeader, ""},
		{"short v1", secret, "t=1700000000,v1=" + good[:63], body, errMalformedHeader, "64 hex"},
		{"non-hex v1", secret, "t=1700000000,v1=" + strings.Repeat("g", 64), body, errMalformedHeader, ""},
		{"empty v1", secret, "t=1700000000,v1=", body, errMalformedHeader, ""},
		{"trailing comma", secret, "t=1700000000,v1=" + good + ",", body, errMalformedHeader, "part 3 is empty"},
		{"double comma", secret, "t=1700000000,,v1=" + good, body, errMalformedHeader, ""},
		{"part without =", secret, "t=1700000000,v1=" + good + ",junk", body, errMalformedHeader, "not key=value"},
		{"empty key", secret, "t=1700000000,=x,v1=" + good, body, errMalformedHeader, ""},
		{"semicolons", secret, "t=1700000000;v1=" + good, body, errMalformedHeader, ""},
		{"empty secret", "", "t=1700000000,v1=" + good, body, nil, "empty secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.secret, tc.header, []byte(tc.body), now, DefaultTolerance)
			switch {
			case tc.wantErr == nil && tc.wantMsg == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("error = %v, want one wrapping %q", err, tc.wantErr)
			case tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
				t.Fatalf("error = %v, want it to say %q", err, tc.wantMsg)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q reveals the secret", err)
			}
		})
	}
	// The four kinds are distinct: no error is two of them.
	kinds := []error{errMalformedHeader, errNoV1Signature, errOutsideTolerance, ErrMismatch}
	for i, a := range kinds {
		for _, b := range kinds[i+1:] {
			if errors.Is(a, b) || a.Error() == b.Error() {
				t.Errorf("%q and %q are not distinct", a, b)
			}
		}
	}
}

func TestVerifySignatureHeaderVariants(t *testing.T) {
	secret, other := NewSecret(), NewSecret()
	const ts = 1_700_000_000
	body := `{"ok":true}`
	good, wrong := sigFor(secret, ts, body), sigFor(other, ts, body)
	for _, header := range []string{
		"t=1700000000,v1=" + good,
		"v1=" + good + ",t=1700000000",
		" t=1700000000 , v1=" + good + " ",
		"t = 1700000000,\tv1 =\t" + good,
		"t=1700000000,v1=" + strings.ToUpper(good),
		"t=1700000000,v0=deadbeef,v1=" + good,
		"t=1700000000,v1=" + wrong + ",v1=" + good,
		"t=1700000000,v1=" + good + ",v1=" + wrong,
		"v1=" + wrong + ", t=1700000000, v2=future, v1=" + good,
		"t=1700000000,v0=,v1=" + good, // unknown schemes are ignored whatever their value
	} {
		t.Run(header, func(t *testing.T) {
			if err := Verify(secret, header, []byte(body), time.Unix(ts, 0), DefaultTolerance); err != nil {
				t.Errorf("Verify(%q) = %v", header, err)
			}
		})
	}
}

func TestVerifyToleranceBoundaries(t *testing.T) {
	secret := NewSecret()
	const ts = 1_700_000_000
	body := `{}`
	header := fmt.Sprintf("t=%d,v1=%s", ts, sigFor(secret, ts, body))
	at := time.Unix(ts, 0)
	tests := []struct {
		name      string
		now       time.Time
		tolerance time.Duration
		wantErr   error
	}{
		{"same second", at, 5 * time.Minute, nil},
		{"exactly tolerance old", at.Add(5 * time.Minute), 5 * time.Minute, nil},
		{"tolerance old plus a fraction of a second", at.Add(5*time.Minute + 999*time.Millisecond), 5 * time.Minute, nil},
		{"one second past tolerance", at.Add(5*time.Minute + time.Second), 5 * time.Minute, errOutsideTolerance},
		{"exactly tolerance in the future", at.Add(-5 * time.Minute), 5 * time.Minute, nil},
		{"one second beyond tolerance in the future", at.Add(-5*time.Minute - time.Second), 5 * time.Minute, errOutsideTolerance},
		{"short tolerance", at.Add(2 * time.Second), time.Second, errOutsideTolerance},
		{"zero tolerance skips the check", at.Add(1000 * time.Hour), 0, nil},
		{"negative tolerance skips the check", at.Add(-1000 * time.Hour), -time.Second, nil},
		{"far future now", time.Unix(1<<40, 0), time.Minute, errOutsideTolerance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Verify(secret, header, []byte(body), tc.now, tc.tolerance); !errors.Is(err, tc.wantErr) {
				t.Errorf("Verify = %v, want %v", err, tc.wantErr)
			}
			hdr := http.Header{}
			mustSigner(t, secret, "").sign("evt_9", at, []byte(body)).Apply(hdr)
			if err := verifyStandardWebhook(secret, hdr, []byte(body), tc.now, tc.tolerance); !errors.Is(err, tc.wantErr) {
				t.Errorf("verifyStandardWebhook = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestVerifyStandardWebhookErrors(t *testing.T) {
	secret := NewSecret()
	at := time.Unix(1_700_000_000, 0)
	body := []byte(`{"a":1}`)
	base := http.Header{}
	mustSigner(t, secret, "").sign("evt_4", at, body).Apply(base)
	tests := []struct {
		name    string
		secret  string
		edit    func(h http.Header)
		body    []byte
		wantErr error
	}{
		{"valid", secret, func(http.Header) {}, body, nil},
		{"tampered body", secret, func(http.Header) {}, []byte(`{"a":2}`), ErrMismatch},
		{"wrong secret", NewSecret(), func(http.Header) {}, body, ErrMismatch},
		{"tampered id", secret, func(h http.Header) { h.Set("webhook-id", "evt_5") }, body, ErrMismatch},
		{"tampered timestamp", secret, func(h http.Header) { h.Set("webhook-timestamp", "1700000001") }, body, ErrMismatch},
		{"missing id", secret, func(h http.Header) { h.Del("webhook-id") }, body, errMalformedHeader},
		{"bad timestamp", secret, func(h http.Header) { h.Set("webhook-timestamp", "soon") }, body, errMalformedHeader},
		{"no v1", secret, func(h http.Header) { h.Set("webhook-signature", "v1a,xyz") }, body, errNoV1Signature},
		{"bad base64", secret, func(h http.Header) { h.Set("webhook-signature", "v1,***") }, body, ErrMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := base.Clone()
			tc.edit(h)
			if err := verifyStandardWebhook(tc.secret, h, tc.body, at, DefaultTolerance); !errors.Is(err, tc.wantErr) {
				t.Errorf("verifyStandardWebhook = %v, want %v", err, tc.wantErr)
			}
		})
	}
	if err := verifyStandardWebhook("whsec_***", base, body, at, DefaultTolerance); !errors.Is(err, errBadSecret) {
		t.Errorf("bad secret: %v", err)
	}
}

func TestApplySetsAllHeaders(t *testing.T) {
	h := http.Header{}
	Headers{Signature: "t=1,v1=a", ID: "evt_1", Timestamp: "1", StdSignature: "v1,b"}.Apply(h)
	for name, want := range map[string]string{
		"X-Webhook-Signature": "t=1,v1=a",
		"webhook-id":          "evt_1",
		"Webhook-Timestamp":   "1",
		"WEBHOOK-SIGNATURE":   "v1,b",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

// One signer serves concurrent deliveries; run with -race.
func TestSignerConcurrent(t *testing.T) {
	cur, old := NewSecret(), NewSecret()
	s := mustSigner(t, cur, old)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprintf("evt_%d_%d", g, i)
				body := []byte(strings.Repeat("b", i))
				at := time.Unix(int64(1_700_000_000+i), 0)
				h := s.sign(id, at, body)
				if err := Verify(old, h.Signature, body, at, DefaultTolerance); err != nil {
					t.Error(err)
					return
				}
				if want := sigFor(cur, at.Unix(), string(body)); !strings.Contains(h.Signature, "v1="+want+",") {
					t.Errorf("%s: %q lacks %s", id, h.Signature, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func benchmarkSign(b *testing.B, old string) {
	s := mustSigner(b, NewSecret(), old)
	body := []byte(`{"id":"evt_01JGQ7ZK3M9X4VB2C8D5E6F7G","type":"order.status.updated","created_at":1735689600,"data":{"object":{"id":"ord_1042","status":"completed"}}}`)
	at := time.Unix(1_735_689_600, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		s.sign("evt_01JGQ7ZK3M9X4VB2C8D5E6F7G", at, body)
	}
}

func BenchmarkSign(b *testing.B)         { benchmarkSign(b, "") }
func BenchmarkSignRotation(b *testing.B) { benchmarkSign(b, NewSecret()) }

func BenchmarkVerify(b *testing.B) {
	secret := NewSecret()
	body := []byte(`{"id":"evt_1","type":"order.status.updated","created_at":1735689600,"data":{"object":{"id":"ord_1042","status":"completed"}}}`)
	at := time.Unix(1_735_689_600, 0)
	h := mustSigner(b, secret, "").sign("evt_1", at, body)
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(secret, h.Signature, body, at, DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParse: parsing arbitrary headers never panics and what parses is
// well formed; a header the signer made always parses back to its own t
// and signatures.
func FuzzParse(f *testing.F) {
	f.Add("t=1700000000,v1="+strings.Repeat("ab", 32), int64(1_700_000_000), []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, header string, ts int64, body []byte) {
		if h, err := Parse(header); err == nil {
			if h.Timestamp < 0 || len(h.V1) == 0 {
				t.Fatalf("%q parsed to %+v", header, h)
			}
			for _, v := range h.V1 {
				if _, err := hex.DecodeString(v); err != nil || len(v) != 64 {
					t.Fatalf("%q parsed to v1 %q", header, v)
				}
			}
			// Re-rendering what parsed gives the same result.
			again := "t=" + strconv.FormatInt(h.Timestamp, 10) + ",v1=" + strings.Join(h.V1, ",v1=")
			h2, err := Parse(again)
			if err != nil || h2.Timestamp != h.Timestamp || strings.Join(h2.V1, ",") != strings.Join(h.V1, ",") {
				t.Fatalf("%q → %+v → %q → %+v, %v", header, h, again, h2, err)
			}
		} else if !errors.Is(err, errMalformedHeader) && !errors.Is(err, errNoV1Signature) {
			t.Fatalf("%q: error %v is neither malformed nor no-v1", header, err)
		}

		if ts < 0 { // unix times before 1970 are never signed
			ts = -(ts + 1)
		}
		for _, old := range []string{"", fuzzOldSecret} {
			out := mustSigner(t, fuzzSecret, old).sign("evt_fuzz", time.Unix(ts, 0), body)
			h, err := Parse(out.Signature)
			if err != nil {
				t.Fatalf("signer's %q does not parse: %v", out.Signature, err)
			}
			want := []string{sigFor(fuzzSecret, ts, string(body))}
			if old != "" {
				want = append(want, sigFor(old, ts, string(body)))
			}
			if h.Timestamp != ts || strings.Join(h.V1, ",") != strings.Join(want, ",") {
				t.Fatalf("signer's %q parsed to %+v, want t=%d v1=%v", out.Signature, h, ts, want)
			}
			if err := Verify(fuzzSecret, out.Signature, body, time.Unix(ts, 0), DefaultTolerance); err != nil {
				t.Fatalf("signer's %q does not verify: %v", out.Signature, err)
			}
		}
	})
}

const (
	fuzzSecret    = "whsec_RYNBcTShNxfrKu3WpaumjYKAopL7REYliaI0seQ9ldQ="
	fuzzOldSecret = "whsec_5khVtL4Ebtnc+iqvgcWsaZ+jQQW8j1t68G22LJ7MjI0="
)

// Sign is the sender's entry point: the same values as the signer, the
// test vector included, through the cache.
func TestSign(t *testing.T) {
	v := loadTestVector(t)
	for _, tc := range []struct {
		name, old, wantSig, wantStd string
	}{
		{"one secret", "", v.ExpectedXWebhookSignature, v.ExpectedWebhookSignature},
		{"rotation grace", v.OldSecret, v.ExpectedXWebhookSigRotated, v.ExpectedWebhookSigRotated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 { // a miss, then hits
				h := Sign(v.Secret, tc.old, v.ID, v.Timestamp, []byte(v.Body))
				sig, std := h.Signature, h.StdSignature
				if sig != tc.wantSig || std != tc.wantStd {
					t.Fatalf("Sign = %q, %q; want %q, %q", sig, std, tc.wantSig, tc.wantStd)
				}
			}
		})
	}
	t.Run("secrets that do not decode still sign", func(t *testing.T) {
		for _, pair := range [][2]string{{"whsec_%%%", ""}, {"", ""}, {"", v.OldSecret}, {v.Secret, "not-a-secret"}} {
			h := Sign(pair[0], pair[1], "evt_1", 1, []byte("{}"))
			sig, std := h.Signature, h.StdSignature
			if !strings.HasPrefix(sig, "t=1,v1=") || !strings.HasPrefix(std, "v1,") {
				t.Errorf("%q: Sign = %q, %q", pair, sig, std)
			}
			if pair[0] != "" {
				if err := Verify(pair[0], sig, []byte("{}"), time.Unix(1, 0), 0); err != nil {
					t.Errorf("%q: %v", pair, err)
				}
			}
		}
	})
	t.Run("cache is bounded", func(t *testing.T) {
		for range maxCachedSigners + 10 {
			Sign(NewSecret(), "", "evt_1", 1, nil)
		}
		n := 0
		signerCache.Range(func(any, any) bool { n++; return true })
		if n > maxCachedSigners {
			t.Errorf("%d cached signers, want ≤ %d", n, maxCachedSigners)
		}
	})
}

// BenchmarkSignCached is the sender's per-attempt cost (cache hit).
func BenchmarkSignCached(b *testing.B) {
	cur := NewSecret()
	body := []byte(`{"id":"evt_01JGQ7ZK3M9X4VB2C8D5E6F7G","type":"order.status.updated","created_at":1735689600,"data":{"object":{"id":"ord_1042","status":"completed"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		Sign(cur, "", "evt_01JGQ7ZK3M9X4VB2C8D5E6F7G", 1_735_689_600, body)
	}
}
