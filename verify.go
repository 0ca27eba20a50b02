package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// maxVerifyBody is the most the verify subcommand reads from stdin. Event
// bodies are far smaller (published events are at most 64 KiB).
const maxVerifyBody = 1 << 20

const verifyUsage = "usage: deeplink verify -secret whsec_... -header 't=...,v1=...' [-tolerance 5m] < body"

// runVerify is the verify subcommand (API.md §1). It returns the exit code:
// 0 valid, 1 invalid (one line on stdout saying why either way), 2 bad usage
// or unreadable input (on stderr).
func runVerify(args []string, stdin io.Reader, stdout io.Writer) int {
	return verifyCommand(args, stdin, stdout, os.Stderr, time.Now())
}

// verifyCommand is runVerify with its error output and clock given.
func verifyCommand(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, verifyUsage) }
	secret := fs.String("secret", "", "the endpoint's signing secret, whsec_…")
	header := fs.String("header", "", "the X-Webhook-Signature header value, t=…,v1=…")
	tolerance := fs.Duration("tolerance", defaultTolerance, "how far the signature time may be from now; 0 skips the check")
	if err := fs.Parse(args); err != nil {
		// The flag package has printed the error and the usage line; -h
		// exits 2 as well, since 0 would read as "valid".
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
	if name, v, ok := strings.Cut(h, ":"); ok && strings.EqualFold(strings.TrimSpace(name), headerSignature) {
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

	if !strings.HasPrefix(*secret, secretPrefix) {
		// No signature is valid under it: an answer, exit 1, not a usage
		// error (API.md §1 has verify exit 0 or 1). Never echo the value.
		fmt.Fprintln(stdout, "invalid: the secret does not start with "+secretPrefix+", so it is no endpoint's signing secret")
		return 1
	}
	if err := verifySignature(*secret, h, body, now, *tolerance); err != nil {
		msg := err.Error()
		// The commonest way to break a good signature on the command line:
		// echo appends a newline the signed body never had.
		if errors.Is(err, errSignatureMismatch) && bytes.HasSuffix(body, []byte("\n")) {
			trimmed := bytes.TrimRight(body, "\r\n")
			if verifySignature(*secret, h, trimmed, now, 0) == nil {
				msg += " (it would match without the trailing newline on stdin: use printf '%s' or echo -n)"
			}
		}
		fmt.Fprintln(stdout, "invalid: "+msg)
		return 1
	}
	sh, _ := parseSignatureHeader(h) // parsed fine above
	age := now.Unix() - sh.Timestamp
	when := "age " + secondsString(age)
	if age < 0 {
		when = secondsString(-age) + " in the future"
	}
	if *tolerance == 0 {
		when += ", time not checked"
	}
	fmt.Fprintf(stdout, "valid: signature matches (t=%d, %s)\n", sh.Timestamp, when)
	return 0
}
