// Package buildinfo names the build: both commands (the native binary and
// the edge host) put it in the User-Agent of their webhook requests.
package buildinfo

import (
	"runtime/debug"
	"time"
)

// Version is the version bi records: the main module's, which go
// build sets from the checkout it builds (a tag such as v1.2.0, or a
// pseudo-version naming the commit and its date), "+dirty" when the
// files differed from the commit; or, with no module version but the
// commit recorded, a version of the same form made from the commit;
// or "devel" when bi records neither, as in what go run and go test
// build by default.
func Version(bi *debug.BuildInfo) string {
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

// Product is a command's version as one token: linked, the version set at
// link time (-ldflags "-X main.version=…"), when there is one, else what
// the build records (Version).
func Product(linked string) string {
	if linked != "" {
		return linked
	}
	bi, _ := debug.ReadBuildInfo()
	return Version(bi)
}
