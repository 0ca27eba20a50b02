package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
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

// version is set at link time with -ldflags "-X main.version=…"; when
// empty, the build's own information says (buildVersion).
var version = ""

// productVersion is the version as one token, for the User-Agent of
// webhook requests and the start-up log line.
func productVersion() string {
	if version != "" {
		return version
	}
	bi, _ := debug.ReadBuildInfo()
	return buildVersion(bi)
}

// versionLine is what the version command prints after the name: the
// version, and for a build that carries none, why.
func versionLine() string {
	v := productVersion()
	if v == "devel" {
		return "devel (this build records no version: go run and -buildvcs=false builds record none; go build in a git clone records the commit, or set one with -ldflags=-X=main.version=VERSION)"
	}
	return v
}

// buildVersion is the version bi records: the main module's, which go
// build sets from the checkout it builds (a tag such as v1.2.0, or a
// pseudo-version naming the commit and its date), "+dirty" when the
// files differed from the commit; or, with no module version but the
// commit recorded, a version of the same form made from the commit;
// or "devel" when bi records neither, as in what go run and go test
// build by default.
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	v := "devel-" + rev[:min(12, len(rev))]
	if t, err := time.Parse(time.RFC3339, at); err == nil {
		v = "v0.0.0-" + t.UTC().Format("20060102150405") + "-" + rev[:min(12, len(rev))]
	}
	if dirty {
		v += "+dirty"
	}
	return v
}
