//go:build !wasip1

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// progName names the command in every usage and error line, whatever the
// path it was started by (go run's is a temporary file in the build cache).
const progName = "deeplink"

// usage is the top-level help: the subcommands, then the serving flags,
// which flag.FlagSet.PrintDefaults appends.
const usage = `deeplink signs players into a webshop from the game app (a deep link with
PKCE), and sends merchants' servers signed webhooks about store events.

Usage:
  deeplink [-config FILE] [-addr HOST:PORT] [-data DIR]
  deeplink verify -secret whsec_... -header 't=...,v1=...' [-tolerance 5m] < body
  deeplink version
  deeplink help [verify]

Commands:
  (none)    serve the HTTP API; without -config, the embedded demo on 127.0.0.1:8080
  verify    check a webhook signature as a merchant's server would
            (exit 0 valid, 1 invalid; "deeplink verify -h" for more)
  version   print the version
  help      print this help, or a command's

A command goes first, before any flag. Flags for serving:
`

// usageFooter follows the flags in the top-level help.
const usageFooter = `
SIGTERM or SIGINT finishes the requests under way (up to 10 s), writes the
state to the data directory and exits 0. A configuration error exits 1
before listening, with one line naming the field.

Documentation: README.md, docs/configuration.md, docs/api.md, docs/operations.md.
`

// serveFlags are the flags of serving, the command without a name.
type serveFlags struct {
	config, addr, data string
}

// newServeFlagSet returns the flag set of serving, its values in f. It
// writes nothing itself: doMain says what went wrong.
func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet(progName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.config, "config", "", "the configuration `FILE` (JSON; every field in docs/configuration.md); without it, the embedded demo")
	fs.StringVar(&f.addr, "addr", "", "listen address `HOST:PORT`, overriding the configuration's listen")
	fs.StringVar(&f.data, "data", "", "state directory `DIR`, overriding the configuration's data_dir")
	return fs
}

// printUsage writes the top-level help to w.
func printUsage(w io.Writer) {
	fs := newServeFlagSet(new(serveFlags))
	fs.SetOutput(w)
	fmt.Fprint(w, usage)
	fs.PrintDefaults()
	fmt.Fprint(w, usageFooter)
}

// doMain is the whole command line: it runs the command args name
// (os.Args[1:]) and returns the exit code, so that tests run it as main
// does. Help asked for goes to stdout and exits 0; a usage error is
// reported on stderr and exits 2; a failure to serve exits 1. stdin is
// the body verify checks.
func doMain(stdin io.Reader, stdout, stderr io.Writer, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "help":
			if len(args) > 1 && args[1] == "verify" {
				printVerifyUsage(stdout)
				return 0
			}
			if len(args) > 1 {
				fmt.Fprintf(stderr, "%s help: no command %q; the commands are verify and version\n", progName, args[1])
				return 2
			}
			printUsage(stdout)
			return 0
		case "version":
			if len(args) > 1 {
				fmt.Fprintf(stderr, "%s version: unexpected argument %q\n", progName, args[1])
				return 2
			}
			fmt.Fprintln(stdout, progName, versionLine())
			return 0
		case "verify":
			return verifyCommand(args[1:], stdin, stdout, stderr, time.Now())
		}
	}
	var f serveFlags
	fs := newServeFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s help' for usage.\n", progName, err, progName)
		return 2
	}
	if fs.NArg() > 0 {
		// Not the server's: a command goes first (deeplink verify …), and
		// a misspelt one must not start the service instead.
		fmt.Fprintf(stderr, "%s: unexpected argument %q: the commands (verify, version, help) come first, before any flag\nRun '%s help' for usage.\n", progName, fs.Arg(0), progName)
		return 2
	}
	if err := run(f); err != nil {
		// The log goes through a buffer: flush it, and print the error
		// itself where it cannot be lost.
		logOut.Flush()
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
