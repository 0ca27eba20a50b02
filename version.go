package main

import (
	"deeplink/internal/webhook"
	"runtime/debug"
	"time"
)

func init() { webhook.UserAgent += "/" + productVersion() }

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
