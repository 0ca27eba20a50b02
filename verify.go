//go:build !wasip1

package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"deeplink/internal/signature"
)

// maxVerifyBody is the most the verify subcommand reads from stdin. Event
// bodies are far smaller (published events are at most 64 KiB).
const maxVerifyBody = 1 << 20

const verifyUsage = "usage: deeplink verify -secret whsec_... -header 't=...,v1=...' [-tolerance 5m] < body"

// verifyHelp follows the usage line and precedes the flags in verify's
// help.
const verifyHelp = `
Checks a webhook request's signature as a merchant's server would: the
body, exactly as received, is read from standard input (at most 1 MiB).
Prints one line saying why it is valid or not, and exits 0 when valid,
1 when not, 2 on bad usage or unreadable input.

Example, with the body saved to body.json:
  deeplink verify -secret "$SECRET" -header "$X_WEBHOOK_SIGNATURE" < body.json

Flags:
`

// newVerifyFlagSet returns verify's flag set, writing to w, and its flags.
func newVerifyFlagSet(w io.Writer) (fs *flag.FlagSet, secret, header *string, tolerance *time.Duration) {
	fs = flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(w)
	secret = fs.String("secret", "", "the endpoint's signing secret, whsec_…")
	header = fs.String("header", "", "the X-Webhook-Signature header's value, t=…,v1=… (with or without its name)")
	tolerance = fs.Duration("tolerance", signature.DefaultTolerance, "how far the signature's time may be from now; 0 skips the check")
	return fs, secret, header, tolerance
}

// printVerifyUsage writes verify's help to w.
func printVerifyUsage(w io.Writer) {
	fs, _, _, _ := newVerifyFlagSet(w)
	fmt.Fprintln(w, verifyUsage)
	fmt.Fprint(w, verifyHelp)
	fs.PrintDefaults()
}

// verifyCommand is the verify subcommand, with its clock given. It
// returns the exit code: 0 valid, 1 invalid (one line on stdout saying
// why either way), 2 bad usage or unreadable input (on stderr). Help
// asked for with -h goes to stdout and exits 0.
func verifyCommand(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) int {
	fs, secret, header, tolerance := newVerifyFlagSet(stderr)
	fs.Usage = func() {} // -h is answered below, on stdout
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printVerifyUsage(stdout)
			return 0
		}
		// The flag package has printed the error.
		fmt.Fprintln(stderr, verifyUsage)
		return 2
	}
	usage := func(why string) int {
		fmt.Fprintln(stderr, "verify: "+why)
		fmt.Fprintln(stderr, verifyUsage)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usage(fmt.Sprintf("unexpected argument %q; the body is read from stdin", fs.Arg(0)))
	case *secret == "":
		return usage("-secret is required")
	case *header == "":
		return usage("-header is required")
	case *tolerance < 0:
		return usage("-tolerance must not be negative (0 skips the time check)")
	}
	// Accept a header pasted with its name, as copied from a request dump.
	h := strings.TrimSpace(*header)
	if name, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(name), signature.HeaderName) {
		h = v
	}

	body, err := io.ReadAll(io.LimitReader(stdin, maxVerifyBody+1))
	if err != nil {
		fmt.Fprintln(stderr, "verify: reading the body from stdin:", err)
		return 2
	}
	if len(body) > maxVerifyBody {
		fmt.Fprintf(stderr, "verify: the body on stdin is larger than %d bytes (1 MiB), the most verify reads\n", maxVerifyBody)
		return 2
	}

	if !strings.HasPrefix(*secret, signature.SecretPrefix) {
		// No signature is valid under it: an answer, exit 1, not a usage
		// error (verify answers 0 or 1 for any input it could read).
		// Never echo the value.
		fmt.Fprintln(stdout, "invalid: the secret does not start with "+signature.SecretPrefix+", so it is no endpoint's signing secret")
		return 1
	}
	if err := signature.Verify(*secret, h, body, now, *tolerance); err != nil {
		msg := err.Error()
		// The commonest way to break a good signature on the command line:
		// echo appends a newline the signed body never had.
		if errors.Is(err, signature.ErrMismatch) && bytes.HasSuffix(body, []byte("\n")) {
			trimmed := bytes.TrimRight(body, "\r\n")
			if signature.Verify(*secret, h, trimmed, now, 0) == nil {
				msg += " (it would match without the trailing newline on stdin: use printf '%s' or echo -n)"
			}
		}
		fmt.Fprintln(stdout, "invalid: "+msg)
		return 1
	}
	sh, _ := signature.Parse(h) // parsed fine above
	age := now.Unix() - sh.Timestamp
	when := "age " + signature.FormatSeconds(age)
	if age < 0 {
		when = signature.FormatSeconds(-age) + " in the future"
	}
	if *tolerance == 0 {
		when += ", time not checked"
	}
	fmt.Fprintf(stdout, "valid: signature matches (t=%d, %s)\n", sh.Timestamp, when)
	return 0
}
