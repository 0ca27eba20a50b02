package main

import (
	"deeplink/internal/buildinfo"
	"deeplink/internal/webhook"
)

func init() { webhook.UserAgent += "/" + productVersion() }

// version is set at link time with -ldflags "-X main.version=…"; when
// empty, the build's own information says (buildinfo.Version).
var version = ""

// productVersion is the version as one token, for the User-Agent of
// webhook requests and the start-up log line.
func productVersion() string { return buildinfo.Product(version) }

// versionLine is what the version command prints after the name: the
// version, and for a build that carries none, why.
func versionLine() string {
	v := productVersion()
	if v == "devel" {
		return "devel (this build records no version: go run and -buildvcs=false builds record none; go build in a git clone records the commit, or set one with -ldflags=-X=main.version=VERSION)"
	}
	return v
}
