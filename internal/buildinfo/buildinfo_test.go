package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "4289a39c0ffee5d9a0b2c5e3f1d7a8b6c4e2f0a1"
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build information", nil, "devel"},
		{"go run: no version, no VCS", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"tagged", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Settings: vcs("vcs.revision", rev)}, "v1.2.0"},
		{"pseudo-version, modified", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261127145303-4289a39c0ffe+dirty"}}, "v0.0.0-20261127145303-4289a39c0ffe+dirty"},
		{"VCS only", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-27T14:53:03Z", "vcs.modified", "false")},
			"v0.0.0-20261127145303-4289a39c0ffe"},
		{"VCS only, modified", &debug.BuildInfo{Settings: vcs("vcs.revision", rev, "vcs.time", "2026-11-27T14:53:03Z", "vcs.modified", "true")},
			"v0.0.0-20261127145303-4289a39c0ffe+dirty"},
		{"VCS revision without a time", &debug.BuildInfo{Settings: vcs("vcs.revision", rev, "vcs.modified", "true")}, "devel-4289a39c0ffe+dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Version(tt.bi); got != tt.want {
				t.Errorf("Version(%+v) = %q; want %q", tt.bi, got, tt.want)
			}
		})
	}
}
