//go:build !wasip1

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestDoMain runs the command line as main does, for everything but
// serving: help and version exit 0 on stdout, usage errors 2 on stderr.
func TestDoMain(t *testing.T) {
	topHelp := []string{"Usage:\n  deeplink [-config FILE] [-addr HOST:PORT] [-data DIR]\n", "\n  verify ", "\n  version ",
		"-config FILE", "-addr HOST:PORT", "-data DIR", "docs/configuration.md"}
	verifyHelp := []string{verifyUsage + "\n", "exits 0 when valid", "-secret string", "-header string", "-tolerance duration", "(default 5m0s)"}
	tests := []struct {
		args       []string
		wantCode   int
		wantStdout []string // each a part of stdout; stdout is empty for nil
		wantStderr []string // each a part of stderr; stderr is empty for nil
	}{
		{[]string{"-h"}, 0, topHelp, nil},
		{[]string{"-help"}, 0, topHelp, nil},
		{[]string{"--help"}, 0, topHelp, nil},
		{[]string{"help"}, 0, topHelp, nil},
		{[]string{"help", "verify"}, 0, verifyHelp, nil},
		{[]string{"verify", "-h"}, 0, verifyHelp, nil},
		{[]string{"verify", "--help"}, 0, verifyHelp, nil},
		{[]string{"version"}, 0, []string{"deeplink devel (this build records no version: go run and"}, nil},

		{[]string{"help", "serve"}, 2, nil, []string{`deeplink help: no command "serve"`}},
		{[]string{"version", "-v"}, 2, nil, []string{`deeplink version: unexpected argument "-v"`}},
		{[]string{"-x"}, 2, nil, []string{"deeplink: flag provided but not defined: -x\n", "Run 'deeplink help' for usage."}},
		{[]string{"-config"}, 2, nil, []string{"deeplink: flag needs an argument: -config\n"}},
		{[]string{"verfy", "-secret", "x"}, 2, nil, []string{`deeplink: unexpected argument "verfy": the commands (verify, version, help) come first`}},
		{[]string{"-addr", "127.0.0.1:0", "version"}, 2, nil, []string{`unexpected argument "version"`}},
		{[]string{"verify"}, 2, nil, []string{"-secret is required", verifyUsage}},
		{[]string{"verify", "-x"}, 2, nil, []string{"flag provided but not defined: -x\n" + verifyUsage + "\n"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := doMain(strings.NewReader(""), &stdout, &stderr, tt.args)
			if code != tt.wantCode {
				t.Errorf("doMain(%q) = %d; want %d (stdout %q, stderr %q)", tt.args, code, tt.wantCode, stdout.String(), stderr.String())
			}
			for _, out := range []struct {
				name string
				got  string
				want []string
			}{{"stdout", stdout.String(), tt.wantStdout}, {"stderr", stderr.String(), tt.wantStderr}} {
				if out.want == nil && out.got != "" {
					t.Errorf("doMain(%q) %s = %q; want nothing", tt.args, out.name, out.got)
				}
				for _, w := range out.want {
					if !strings.Contains(out.got, w) {
						t.Errorf("doMain(%q) %s = %q; want it to contain %q", tt.args, out.name, out.got, w)
					}
				}
				// Named deeplink, never by the path the binary runs from.
				if strings.Contains(out.got, os.Args[0]) {
					t.Errorf("doMain(%q) %s = %q; want no %q in it", tt.args, out.name, out.got, os.Args[0])
				}
			}
		})
	}
}

// TestVersion: the version command prints the link-time version when one
// was set, and the build's own otherwise.
func TestVersion(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "1.4.0"
	var stdout bytes.Buffer
	if code := doMain(nil, &stdout, &stdout, []string{"version"}); code != 0 || stdout.String() != "deeplink 1.4.0\n" {
		t.Errorf("doMain(version) with -X main.version=1.4.0 = %d, %q; want 0, %q", code, stdout.String(), "deeplink 1.4.0\n")
	}
}
