package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShutdownDelay runs the binary with shutdown.delay: after SIGTERM,
// /readyz answers 503 with Retry-After while a registration is still
// served; a second SIGTERM cuts the delay short, and the service then
// stops as always, exit 0 with the state written: the code registered
// during the delay is live after a restart.
func TestShutdownDelay(t *testing.T) {
	art, err := buildNative()
	require.NoError(t, err)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgFile := writeTestConfig(t, dir, map[string]any{
		"shutdown": map[string]any{"delay": "5m"}, // cut short by the second signal
	})
	addr, err := ctFreeAddr()
	require.NoError(t, err)
	base := "http://" + addr

	p, err := ctLaunch([]string{art.native, "-config", cfgFile, "-addr", addr, "-data", data}, filepath.Join(dir, "log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	require.NoError(t, p.waitReady(base, 30*time.Second))

	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) *http.Response {
		resp, err := c.Get(base + path)
		require.NoError(t, err, "GET %s", path)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	var resp *http.Response
	for resp = get("/readyz"); resp.StatusCode == http.StatusOK; resp = get("/readyz") {
		select {
		case <-giveUp:
			t.Fatalf("/readyz still 200 10 s after SIGTERM\n%s", ctTail(p.logPath))
		case <-tick.C:
		}
	}
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "/readyz after SIGTERM")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"), "/readyz after SIGTERM: Retry-After")
	assert.Equal(t, http.StatusOK, get("/healthz").StatusCode, "/healthz during shutdown.delay")

	const code = "code-registered-during-the-delay"
	body, err := json.Marshal(map[string]string{
		"auth_code": code, "redirect_uri": testRedirectURI, "client_reference_id": "player-42",
		"code_challenge": s256(testVerifier), "state": "st",
	})
	require.NoError(t, err)
	req, err := http.NewRequest("POST", base+"/stores/"+testStoreID+"/auth/auth-code", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testAPIKey)
	req.Header.Set("Content-Type", "application/json")
	reg, err := c.Do(req)
	require.NoError(t, err)
	reg.Body.Close()
	assert.Equal(t, http.StatusOK, reg.StatusCode, "a registration during shutdown.delay")
	select {
	case <-p.exited:
		t.Fatalf("exited during shutdown.delay: %v\n%s", p.err, ctTail(p.logPath))
	default:
	}

	require.NoError(t, p.terminate(30*time.Second)) // the second signal: exit 0
	log, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	assert.Contains(t, string(log), "state written", "log")

	a := startApp(t, storeTestConfig(t, data))
	assert.Equal(t, http.StatusConflict, a.registerCode(t, code), "the code registered during the delay, after a restart")
}
