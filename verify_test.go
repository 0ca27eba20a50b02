//go:build !wasip1

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"deeplink/internal/signature"
)

func TestVerifyCommand(t *testing.T) {
	v := verifyVector(t)
	at := time.Unix(v.Timestamp, 0)
	secret := signature.NewSecret()
	body := `{"id":"evt_7","type":"order.status.updated"}`
	h := signature.Sign(secret, "", "evt_7", at.Unix(), []byte(body))
	rotated := signature.Sign(signature.NewSecret(), secret, "evt_7", at.Unix(), []byte(body))
	old := signature.Sign(secret, "", "evt_7", (at.Add(-7 * time.Minute)).Unix(), []byte(body))

	tests := []struct {
		name     string
		args     []string
		stdin    string
		now      time.Time
		wantCode int
		wantOut  string // stdout is this single line (exit 0 and 1)
		wantErr  string // stderr contains this (exit 2)
	}{
		{"valid", []string{"-secret", secret, "-header", h.Signature}, body, at.Add(3 * time.Second),
			0, fmt.Sprintf("valid: signature matches (t=%d, age 3s)", v.Timestamp), ""},
		{"valid with = flags", []string{"-secret=" + secret, "-header=" + h.Signature, "-tolerance=1m"}, body, at,
			0, fmt.Sprintf("valid: signature matches (t=%d, age 0s)", v.Timestamp), ""},
		{"test vector", []string{"-secret", v.Secret, "-header", v.ExpectedXWebhookSignature, "-tolerance", "0"}, v.Body, time.Unix(1_800_000_000, 0),
			0, fmt.Sprintf("valid: signature matches (t=%d, age %s, time not checked)", v.Timestamp, signature.FormatSeconds(1_800_000_000-v.Timestamp)), ""},
		{"test vector rotation, old secret", []string{"-secret", v.OldSecret, "-header", v.ExpectedXWebhookSigRotated}, v.Body, at,
			0, fmt.Sprintf("valid: signature matches (t=%d, age 0s)", v.Timestamp), ""},
		{"rotation, previous secret", []string{"-secret", secret, "-header", rotated.Signature}, body, at,
			0, fmt.Sprintf("valid: signature matches (t=%d, age 0s)", v.Timestamp), ""},
		{"header pasted with its name", []string{"-secret", secret, "-header", "X-Webhook-Signature: " + h.Signature}, body, at,
			0, fmt.Sprintf("valid: signature matches (t=%d, age 0s)", v.Timestamp), ""},
		{"clock behind", []string{"-secret", secret, "-header", h.Signature}, body, at.Add(-2 * time.Second),
			0, fmt.Sprintf("valid: signature matches (t=%d, 2s in the future)", v.Timestamp), ""},

		{"tampered body", []string{"-secret", secret, "-header", h.Signature}, body + "x", at,
			1, "invalid: signature mismatch: the v1 signature does not match this secret and body", ""},
		{"trailing newline from echo", []string{"-secret", secret, "-header", h.Signature}, body + "\n", at,
			1, "invalid: signature mismatch: the v1 signature does not match this secret and body (it would match without the trailing newline on stdin: use printf '%s' or echo -n)", ""},
		{"wrong secret", []string{"-secret", signature.NewSecret(), "-header", h.Signature}, body, at,
			1, "invalid: signature mismatch: the v1 signature does not match this secret and body", ""},
		{"too old", []string{"-secret", secret, "-header", old.Signature}, body, at,
			1, "invalid: timestamp is 7m0s old, tolerance 5m0s", ""},
		{"too old for a custom tolerance", []string{"-secret", secret, "-header", h.Signature, "-tolerance", "10s"}, body, at.Add(11 * time.Second),
			1, "invalid: timestamp is 11s old, tolerance 10s", ""},
		{"old but within a wider tolerance", []string{"-secret", secret, "-header", old.Signature, "-tolerance", "10m"}, body, at,
			0, fmt.Sprintf("valid: signature matches (t=%s, age 7m0s)", old.Timestamp), ""},
		{"malformed header", []string{"-secret", secret, "-header", "sig=abc"}, body, at,
			1, "invalid: malformed signature header: no t=", ""},
		{"no v1", []string{"-secret", secret, "-header", "t=1,v0=abc"}, body, at,
			1, "invalid: no v1 signature in header", ""},
		{"secret without prefix", []string{"-secret", "abc", "-header", h.Signature}, body, at,
			1, "invalid: the secret does not start with whsec_, so it is no endpoint's signing secret", ""},

		{"missing secret", []string{"-header", h.Signature}, body, at, 2, "", "-secret is required"},
		{"missing header", []string{"-secret", secret}, body, at, 2, "", "-header is required"},
		{"no flags", nil, body, at, 2, "", verifyUsage},
		{"unknown flag", []string{"-secret", secret, "-header", h.Signature, "-x"}, body, at, 2, "", "flag provided but not defined: -x"},
		{"bad tolerance", []string{"-secret", secret, "-header", h.Signature, "-tolerance", "5"}, body, at, 2, "", "invalid value"},
		{"negative tolerance", []string{"-secret", secret, "-header", h.Signature, "-tolerance", "-1s"}, body, at, 2, "", "must not be negative"},
		{"positional argument", []string{"-secret", secret, "-header", h.Signature, "body.json"}, body, at, 2, "", "unexpected argument"},
		{"body over 1 MiB", []string{"-secret", secret, "-header", h.Signature}, strings.Repeat("x", maxVerifyBody+1), at, 2, "", "larger than 1048576 bytes (1 MiB)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := verifyCommand(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr, tc.now)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stdout %q, stderr %q", code, tc.wantCode, stdout.String(), stderr.String())
			}
			if tc.wantOut != "" && stdout.String() != tc.wantOut+"\n" {
				t.Errorf("stdout = %q, want the one line %q", stdout.String(), tc.wantOut)
			}
			if (code == 0 || code == 1) && tc.wantErr == "" && stderr.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
			if tc.wantErr != "" && !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.wantErr)
			}
			if code == 2 && tc.name != "body over 1 MiB" { // input, not usage
				if stdout.Len() != 0 {
					t.Errorf("usage error wrote stdout %q", stdout.String())
				}
				if !strings.Contains(stderr.String(), verifyUsage) {
					t.Errorf("stderr = %q, want the usage line", stderr.String())
				}
			}
			for _, s := range []string{secret, v.Secret, v.OldSecret} {
				if strings.Contains(stdout.String()+stderr.String(), s) {
					t.Errorf("output reveals a secret: stdout %q stderr %q", stdout.String(), stderr.String())
				}
			}
		})
	}
}

// verify through doMain, on the real clock, as main runs it.
func TestRunVerify(t *testing.T) {
	secret := signature.NewSecret()
	body := []byte(`{"id":"evt_8"}`)
	h := signature.Sign(secret, "", "evt_8", time.Now().Unix(), body)
	tests := []struct {
		name     string
		secret   string
		wantCode int
		wantOut  string
	}{
		{"valid", secret, 0, "valid: signature matches ("},
		{"invalid", signature.NewSecret(), 1, "invalid: signature mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			code := doMain(bytes.NewReader(body), &stdout, io.Discard, []string{"verify", "-secret", tc.secret, "-header", h.Signature})
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stdout %q)", code, tc.wantCode, stdout.String())
			}
			out := stdout.String()
			if !strings.HasPrefix(out, tc.wantOut) || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Errorf("stdout = %q, want one line starting %q", out, tc.wantOut)
			}
		})
	}
	var stdout bytes.Buffer
	if code := doMain(strings.NewReader(""), &stdout, io.Discard, []string{"verify"}); code != 2 || stdout.Len() != 0 {
		t.Errorf("no flags: exit %d, stdout %q; want 2 and nothing on stdout", code, stdout.String())
	}
}

// verifyVector is what these tests read of
// testdata/webhook_test_vector.json (internal/webhook's tests check all of
// it against the signer).
func verifyVector(t *testing.T) (v struct {
	Secret                     string `json:"secret"`
	Timestamp                  int64  `json:"timestamp"`
	Body                       string `json:"body"`
	ExpectedXWebhookSignature  string `json:"expected_x_webhook_signature"`
	OldSecret                  string `json:"old_secret"`
	ExpectedXWebhookSigRotated string `json:"expected_x_webhook_signature_rotation"`
}) {
	t.Helper()
	b, err := os.ReadFile("testdata/webhook_test_vector.json")
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}
