package main

import (
	"os"
	"os/exec"
	"testing"
)

// requireToolsEnv, set to "require" (test.sh sets it, having installed
// every tool the tests use), makes a missing tool fail the test that
// needs it rather than skip it.
const requireToolsEnv = "DEEPLINK_TEST_TOOLS"

// needTool returns the path of the command name, for a test that runs
// it. Where it is not installed, as under a plain go test on a machine
// without it, the test is skipped, saying so, or fails when
// requireToolsEnv asks for every tool.
func needTool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv(requireToolsEnv) == "require" {
		t.Fatalf("%s is not installed, and %s=require: ./test.sh installs it", name, requireToolsEnv)
	}
	t.Skipf("skipped: %s is not installed (./test.sh installs it; %s=require makes this a failure)", name, requireToolsEnv)
	return ""
}
