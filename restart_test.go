package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/webhook"
)

const (
	testStoreID     = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	testAPIKey      = "ak_test_0123456789"
	testRedirectURI = "https://shop.example.com/stores/" + testStoreID + "/auth/callback"
	// A code_verifier; testChallenge-style S256 hashes are computed, not copied.
	testVerifier = "dBjftJeZ4CVP-mJ92K9ufU9mQOzzE8UvfBVdGpTWnWY"
)

// storeTestConfig returns a configuration with one store whose state lives in
// dataDir.
func storeTestConfig(t testing.TB, dataDir string) *Config {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"data_dir": dataDir,
		"stores": []map[string]any{{
			"id":               testStoreID,
			"name":             "Test store",
			"api_keys":         []string{testAPIKey},
			"redirect_domains": []string{"shop.example.com"},
		}},
	})
	require.NoError(t, err)
	cfg, err := ParseConfig(b)
	require.NoError(t, err)
	return cfg
}

// testApp is a running app behind an httptest server.
type testApp struct {
	*app
	ts         *httptest.Server
	once       sync.Once
	endpointID string // of the endpoint TestShutdownRetriesTheWrite made
}

// startApp builds the whole service on cfg and serves it; the test's
// cleanup stops it if the test has not.
func startApp(t *testing.T, cfg *Config) *testApp {
	t.Helper()
	a, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	require.NoError(t, err)
	ta := serveTestApp(a)
	t.Cleanup(func() { ta.stop(t) })
	return ta
}

// serveTestApp serves a, ready, behind an httptest server.
func serveTestApp(a *app) *testApp {
	ta := &testApp{app: a, ts: httptest.NewServer(a.srv.handler())}
	a.srv.ready.Store(true)
	return ta
}

// stop shuts the app down as a graceful stop does: no more requests, then
// the state written.
func (ta *testApp) stop(t *testing.T) {
	t.Helper()
	ta.once.Do(func() {
		ta.ts.Close()
		require.NoError(t, ta.Close())
	})
}

// createEndpoint asks to create a webhook endpoint of the test store and
// returns the response, its body for the caller to read and close.
func (ta *testApp) createEndpoint(t *testing.T) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", ta.ts.URL+"/stores/"+testStoreID+"/webhooks",
		strings.NewReader(`{"url":"https://hooks.example.com/x","events":["webhook.test"]}`))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := ta.ts.Client().Do(req)
	require.NoError(t, err)
	return resp
}

// registerCode registers code with the test challenge and returns the
// status.
func (ta *testApp) registerCode(t *testing.T, code string) int {
	t.Helper()
	body, err := json.Marshal(map[string]string{
		"auth_code":           code,
		"redirect_uri":        testRedirectURI,
		"client_reference_id": "player-42",
		"code_challenge":      s256(testVerifier),
		"state":               "st",
		"first_name":          "Ada",
		"country":             "GB",
		"timezone":            "Europe/London",
	})
	require.NoError(t, err)
	req, err := http.NewRequest("POST", ta.ts.URL+"/stores/"+testStoreID+"/auth/auth-code", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := ta.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// redeemCode exchanges code at the token endpoint and returns the status
// and the decoded body.
func (ta *testApp) redeemCode(t *testing.T, code string) (int, map[string]any) {
	t.Helper()
	resp, err := ta.ts.Client().PostForm(ta.ts.URL+"/stores/"+testStoreID+"/auth/token", url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {testRedirectURI},
		"code_verifier": {testVerifier},
	})
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

// me calls /me with token and returns the status and the decoded body.
func (ta *testApp) me(t *testing.T, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("GET", ta.ts.URL+"/stores/"+testStoreID+"/auth/me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := ta.ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func TestRestartKeepsCodesAndSessions(t *testing.T) {
	cfg := storeTestConfig(t, t.TempDir())
	const (
		kept     = "code-kept-across-restart-0001"
		redeemed = "code-redeemed-before-restart-02"
	)

	a1 := startApp(t, cfg)
	require.Equal(t, http.StatusOK, a1.registerCode(t, kept))
	require.Equal(t, http.StatusOK, a1.registerCode(t, redeemed))
	status, body := a1.redeemCode(t, redeemed)
	require.Equal(t, http.StatusOK, status, "token: %v", body)
	token, _ := body["access_token"].(string)
	require.NotEmpty(t, token)
	a1.stop(t)

	a2 := startApp(t, cfg)

	// The session issued before the restart still works.
	status, body = a2.me(t, token)
	require.Equal(t, http.StatusOK, status, "me after restart: %v", body)
	player := body["data"].(map[string]any)["player"].(map[string]any)
	assert.Equal(t, "player-42", player["client_reference_id"])
	assert.Equal(t, "Ada", player["first_name"])
	assert.Equal(t, "Europe/London", player["timezone"])

	// The registered code is still live: a second registration conflicts,
	// and it redeems exactly once.
	assert.Equal(t, http.StatusConflict, a2.registerCode(t, kept))
	status, body = a2.redeemCode(t, kept)
	require.Equal(t, http.StatusOK, status, "first redemption after restart: %v", body)
	assert.Equal(t, "Bearer", body["token_type"])
	assert.Equal(t, "player-42", body["player"].(map[string]any)["client_reference_id"])
	status, body = a2.redeemCode(t, kept)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_grant", body["error"])

	// The code redeemed before the restart stays used up, and its replay
	// revokes the token it issued (API.md §4.2).
	status, body = a2.redeemCode(t, redeemed)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_grant", body["error"])
	status, _ = a2.me(t, token)
	assert.Equal(t, http.StatusUnauthorized, status, "token of a replayed code still works")
	a2.stop(t)

	// The revocation and the second redemption survive a further restart.
	a3 := startApp(t, cfg)
	status, _ = a3.me(t, token)
	assert.Equal(t, http.StatusUnauthorized, status, "revoked token came back after restart")
	status, body = a3.redeemCode(t, kept)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Equal(t, "invalid_grant", body["error"])
}

// openTestApp restores cfg's state and serves it, like startApp, but
// starts no ticker: nothing is written but what a request writes itself,
// or the test. Dropping it unclosed is a crash (kill -9, a power cut):
// nothing more is written for it.
func openTestApp(t *testing.T, cfg *Config) *testApp {
	t.Helper()
	a, err := openApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	require.NoError(t, err)
	ta := serveTestApp(a)
	t.Cleanup(ta.ts.Close)
	return ta
}

// TestRedemptionSurvivesCrash checks that whatever a redemption attempt
// changed is on disk before it is answered: after the process dies
// without writing its state, a redeemed code is still used up and its
// token still signs in, a replay's revocation holds, and so does the use
// of a code by a failed attempt.
func TestRedemptionSurvivesCrash(t *testing.T) {
	cfg := storeTestConfig(t, t.TempDir())
	const (
		code   = "code-redeemed-before-a-crash-01"
		late   = "code-replayed-past-its-ttl-0003"
		failed = "code-failed-before-a-crash-0002"
	)
	a1 := openTestApp(t, cfg)
	for _, c := range []string{code, late, failed} {
		require.Equal(t, http.StatusOK, a1.registerCode(t, c))
	}
	redeem := func(a *testApp, code string) string {
		status, body := a.redeemCode(t, code)
		require.Equal(t, http.StatusOK, status, "token: %v", body)
		token, _ := body["access_token"].(string)
		require.NotEmpty(t, token)
		return token
	}
	token, lateToken := redeem(a1, code), redeem(a1, late)
	resp, err := a1.ts.Client().PostForm(a1.ts.URL+"/stores/"+testStoreID+"/auth/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {failed}, "redirect_uri": {testRedirectURI},
		"code_verifier": {strings.Repeat("x", 43)},
	})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a wrong code_verifier")
	a1.ts.Close() // a1 is dropped, its state never written

	a2 := openTestApp(t, cfg)
	status, body := a2.me(t, token)
	assert.Equal(t, http.StatusOK, status, "me after the crash: %v", body)
	// The replay key, which revokes the token once the code's TTL is
	// past, survived too.
	v, err := a2.store.Get(t.Context(), replayKey(testStoreID, code).name())
	require.NoError(t, err, "the replay key after the crash")
	named, replayed, ok := decodeMarker(v)
	assert.True(t, ok && !replayed && named == tokenKey(token), "the replay key names the token")
	status, body = a2.redeemCode(t, failed)
	assert.Equal(t, http.StatusBadRequest, status, "the code a failed attempt used, redeemed after the crash: %v", body)
	status, body = a2.redeemCode(t, code)
	assert.Equal(t, http.StatusBadRequest, status, "a second redemption after the crash: %v", body)
	assert.Equal(t, "invalid_grant", body["error"])
	status, _ = a2.me(t, token)
	assert.Equal(t, http.StatusUnauthorized, status, "token of a replayed code still works")
	// A replay once the code's key has expired revokes through the
	// replay key.
	require.NoError(t, a2.store.Delete(t.Context(), codeKey(testStoreID, late).name()))
	status, _ = a2.redeemCode(t, late)
	assert.Equal(t, http.StatusBadRequest, status, "a replay past the code's TTL")
	status, _ = a2.me(t, lateToken)
	assert.Equal(t, http.StatusUnauthorized, status, "token of a code replayed past its TTL still works")
	a2.ts.Close()

	a3 := openTestApp(t, cfg)
	for _, tok := range []string{token, lateToken} {
		status, _ = a3.me(t, tok)
		assert.Equal(t, http.StatusUnauthorized, status, "a revocation was lost with a crash")
	}
}

// TestRefusedRedemptionSurvivesCrash checks that a redemption answered
// 503 (here the store is full) has used the code up on disk too: after a
// crash, and with room again, the code does not sign anyone in.
func TestRefusedRedemptionSurvivesCrash(t *testing.T) {
	cfg := storeTestConfig(t, t.TempDir())
	cfg.MaxLiveEntries = 3 // the cookie key, the store's settings and the code fill it: no room for the replay key
	a1 := openTestApp(t, cfg)
	const code = "code-refused-before-a-crash-004"
	require.Equal(t, http.StatusOK, a1.registerCode(t, code))
	status, body := a1.redeemCode(t, code)
	require.Equal(t, http.StatusServiceUnavailable, status, "token: %v", body)
	a1.ts.Close() // a1 is dropped, its state never written

	roomy := *cfg
	roomy.MaxLiveEntries = 100
	status, body = openTestApp(t, &roomy).redeemCode(t, code)
	assert.Equal(t, http.StatusBadRequest, status, "the code redeemed after a crash: %v", body)
}

// failingInserts is a store that cannot write an Insert.
type failingInserts struct{ store.Store }

func (failingInserts) Insert(context.Context, string, []byte, time.Time) error {
	return fmt.Errorf("%w: disk gone", store.ErrUnavailable)
}

// TestRedemptionCannotStore makes storing the session fail under a
// redemption: it is answered 503 with Retry-After, and no replay key is
// left behind naming no token.
func TestRedemptionCannotStore(t *testing.T) {
	cfg := storeTestConfig(t, t.TempDir())
	a := openTestApp(t, cfg)
	const code = "code-redeemed-when-disk-fails-1"
	require.Equal(t, http.StatusOK, a.registerCode(t, code))
	a.srv.store = failingInserts{a.srv.store}
	resp, err := a.ts.Client().PostForm(a.ts.URL+"/stores/"+testStoreID+"/auth/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {testRedirectURI},
		"code_verifier": {testVerifier},
	})
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "body %s", b)
	assert.Contains(t, string(b), `"temporarily_unavailable"`)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"), "Retry-After")
	// Looked up by key, not counted: the fairness counters of the
	// registration reach the store when the every-second sweep runs.
	_, err = a.db.Get(t.Context(), replayKey(testStoreID, code).name())
	assert.ErrorIs(t, err, store.ErrNotFound, "a replay key naming no token")
	_, err = a.db.Get(t.Context(), codeKey(testStoreID, code).name())
	assert.NoError(t, err, "the code's entry")
}

// newestStateFile returns the newest of dir's files named stem-GEN, and GEN.
func newestStateFile(t *testing.T, dir, stem string) (string, uint64) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, stem+"-????????????????"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no %s file in %s", stem, dir)
	slices.Sort(paths)
	last := paths[len(paths)-1]
	gen, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(last), stem+"-"), 16, 64)
	require.NoError(t, err)
	return last, gen
}

// TestRestartDamagedJournal: a record damaged before the journal's last
// (not a write a crash cut short) stops the start with one line naming
// the file.
func TestRestartDamagedJournal(t *testing.T) {
	dir := t.TempDir()
	cfg := storeTestConfig(t, dir)
	a := startApp(t, cfg)
	require.Equal(t, http.StatusOK, a.registerCode(t, "code-before-corruption-01"))
	require.Equal(t, http.StatusOK, a.registerCode(t, "code-before-corruption-02"))
	a.stop(t)

	path, _ := newestStateFile(t, dir, "journal")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[30] ^= 0x10 // inside the first record
	require.NoError(t, os.WriteFile(path, b, 0o600))

	got, err := newApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if got != nil {
		got.Close()
	}
	require.Error(t, err, "newApp started on a damaged journal")
	assert.Contains(t, err.Error(), path)
	assert.NotContains(t, err.Error(), "\n", "one line")
}

// TestSIGTERMWhileStarting stops the binary while it restores its state,
// /healthz up and /readyz still 503: SIGTERM then ends it as API.md §1
// says it ends a serving one, with exit code 0 and the state intact.
func TestSIGTERMWhileStarting(t *testing.T) {
	art, err := buildNative()
	require.NoError(t, err)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Enough state that restoring it takes a while, against a poll every
	// millisecond.
	const n = 300_000
	fillStore(t, data, n, shortEntry)
	cfgFile := writeTestConfig(t, dir, nil)
	addr, err := ctFreeAddr()
	require.NoError(t, err)

	p, err := ctLaunch([]string{art.native, "-config", cfgFile, "-addr", addr, "-data", data}, filepath.Join(dir, "log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	status := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for status("/healthz") != http.StatusOK {
		select {
		case <-p.exited:
			t.Fatalf("exited before listening: %v\n%s", p.err, ctTail(p.logPath))
		case <-tick.C:
		}
	}
	require.Equal(t, http.StatusServiceUnavailable, status("/readyz"),
		"/readyz before the signal: the state was restored already, too soon for this test")
	require.NoError(t, p.terminate(30*time.Second))

	r, err := embedded.Open(data, embedded.Options{})
	require.NoError(t, err)
	defer r.Close()
	assert.Equal(t, n+2, r.Len(), "entries after the interrupted start-up: the state's, the cookie key and the store's settings")
	log, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	assert.Contains(t, string(log), "state written", "log")
	assert.NotContains(t, string(log), `"msg":"serving"`, "log: it never became ready")
}

// fillStore writes the n entries entry(0)…entry(n-1) (key, value) into a
// store in dir, from 64 goroutines so that they share their fsyncs, each
// for an hour, and closes it: the files are then those a crash leaves, a
// snapshot and the journal after it.
func fillStore(tb testing.TB, dir string, n int, entry func(i int) (string, []byte)) {
	tb.Helper()
	s, err := embedded.Open(dir, embedded.Options{Durability: embedded.Interval})
	require.NoError(tb, err)
	exp := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				k, v := entry(i)
				if err := s.Put(context.Background(), k, v, exp); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(tb, s.Close())
}

// shortEntry is a fillStore entry: a small key and a value as long as a
// short code record.
func shortEntry(i int) (string, []byte) {
	return "k" + strconv.Itoa(i), []byte("a value of the state, as long as a short code record")
}

// TestTempFilesRemovedAtStart: the temporary files a crash leaves while
// writing the state (as large as what they were to replace) are removed
// when the service next starts; other files in data_dir are left alone.
func TestTempFilesRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	crashLeft := []string{"snapshot-0000000000000002-123.tmp", webhook.HooksFileName + ".tmp42", cookieKeyFile + ".tmp7"}
	others := []string{"notes.tmp1", "snapshot.bak", "backup.tmp", "store-.tmp3x"}
	for _, name := range append(crashLeft, others...) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o600))
	}
	openTestApp(t, storeTestConfig(t, dir))
	for _, name := range crashLeft {
		assert.NoFileExists(t, filepath.Join(dir, name))
	}
	for _, name := range others {
		assert.FileExists(t, filepath.Join(dir, name))
	}
}

// TestStartingEmptyIsLogged: a data_dir without any state (made just now,
// or a volume not mounted) is said in the log, and one with state is not,
// and the demo, which starts empty as a rule, says nothing.
func TestStartingEmptyIsLogged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	for _, tt := range []struct {
		name string
		demo bool
		want bool
	}{
		{"missing", false, true},
		{"written once", false, false},
		{"demo, missing", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := dir
			if tt.demo {
				d = filepath.Join(t.TempDir(), "demo")
			}
			var log bytes.Buffer
			a, err := openApp(storeTestConfig(t, d), slog.New(slog.NewTextHandler(&log, nil)), tt.demo)
			require.NoError(t, err)
			require.NoError(t, a.Close()) // writes the state, for the next case
			got := strings.Contains(log.String(), "data_dir holds no saved state")
			assert.Equal(t, tt.want, got, "warned of an empty start; log:\n%s", log.String())
		})
	}
}

// TestWebhookChangeAfterStopBegan: once the graceful stop has closed the
// store, a webhook change (a request the stop cut off) answers 503 rather
// than 201 for a change no save would write.
func TestWebhookChangeAfterStopBegan(t *testing.T) {
	cfg := storeTestConfig(t, t.TempDir())
	ta := startApp(t, cfg)
	require.NoError(t, ta.store.Close())
	resp := ta.createEndpoint(t)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
}

// TestEarlierBuildImported starts on the data_dir an earlier build wrote
// (testdata/earlier-build: one code registered, one redeemed, then a
// graceful stop): the live code redeems once, the redeemed one stays used
// and its replay revokes its token, which worked until then; the earlier
// files are moved aside, and a second start reads only the new ones.
func TestEarlierBuildImported(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS("testdata/earlier-build")))
	var issued struct {
		AccessToken string `json:"access_token"`
	}
	b, err := os.ReadFile("testdata/earlier-build.token.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &issued))
	cfg := storeTestConfig(t, dir)
	const verifier = "legacy-verifier-0123456789-0123456789-0123456789"
	redeem := func(a *testApp, code string) (int, map[string]any) {
		resp, err := a.ts.Client().PostForm(a.ts.URL+"/stores/"+testStoreID+"/auth/token", url.Values{
			"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {"http://127.0.0.1/cb"},
			"code_verifier": {verifier},
		})
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}

	key, err := os.ReadFile(filepath.Join(dir, cookieKeyFile))
	require.NoError(t, err)
	a := startApp(t, cfg)
	assert.Equal(t, key, a.srv.cookieKey, "the link cookie's key, taken into the store")
	assert.FileExists(t, filepath.Join(dir, legacyMovedDir, cookieKeyFile))
	assert.NoFileExists(t, filepath.Join(dir, "store-00.snap"), "the earlier files, moved aside")
	assert.FileExists(t, filepath.Join(dir, "earlier-build", "store-00.snap"))
	status, body := a.me(t, issued.AccessToken)
	assert.Equal(t, http.StatusOK, status, "the earlier build's token: %v", body)
	a.stop(t)

	a = startApp(t, cfg) // from the new files alone
	status, body = redeem(a, "legacy-code-unredeemed-0001")
	assert.Equal(t, http.StatusOK, status, "the earlier build's live code: %v", body)
	status, _ = redeem(a, "legacy-code-unredeemed-0001")
	assert.Equal(t, http.StatusBadRequest, status, "redeemed twice")
	status, _ = redeem(a, "legacy-code-redeemed-00002")
	assert.Equal(t, http.StatusBadRequest, status, "the earlier build's redeemed code, replayed")
	status, _ = a.me(t, issued.AccessToken)
	assert.Equal(t, http.StatusUnauthorized, status, "its token after the replay")
}

// writeTestConfig writes dir/config.json, the test store and the members
// of extra, and returns its path.
func writeTestConfig(t *testing.T, dir string, extra map[string]any) string {
	t.Helper()
	doc := map[string]any{
		"stores": []map[string]any{{
			"id": testStoreID, "name": "Test store", "api_keys": []string{testAPIKey},
			"redirect_domains": []string{"shop.example.com"},
		}},
	}
	for k, v := range extra {
		doc[k] = v
	}
	cfg, err := json.Marshal(doc)
	require.NoError(t, err)
	path := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(path, cfg, 0o600))
	return path
}

// TestWebhooksOfAnEarlierBuild starts on a data_dir that the build of
// the working copy wrote (testdata/webhooks-earlier-build, made as
// testdata/webhooks-earlier-build.json says): once upgraded, its
// endpoints are listed in the order they were made, each log holds its
// deliveries with their events byte for byte, the Idempotency-Key
// answers its event, and the pending deliveries are queued and go out
// when due.
func TestWebhooksOfAnEarlierBuild(t *testing.T) {
	var fx struct {
		Endpoints, Descriptions, Events []string
		Key                             string `json:"idempotency_key"`
		KeyedEvent                      string `json:"keyed_event"`
	}
	b, err := os.ReadFile("testdata/webhooks-earlier-build.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &fx))
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS("testdata/webhooks-earlier-build")))
	conf := whFast()
	conf.DataDir = dir
	conf.Retry = []string{"1h", "1h", "1h"} // an attempt due at the start (to the refused address) leaves it pending
	w := whStart(t, conf)

	eps := w.do(t, whReq{method: "GET", path: whHooksPath(whStoreA), key: whKeyA}).list()
	assert.Equal(t, fx.Endpoints, whField(eps, "id"), "the endpoints, in the order they were made")
	assert.Equal(t, fx.Descriptions, whField(eps, "description"))
	for _, ep := range fx.Endpoints {
		ds := w.whDeliveries(t, ep, "")
		assert.ElementsMatch(t, fx.Events, whField(ds, "event_id"), "the log of %s", ep)
		for _, d := range ds {
			assert.Equal(t, webhook.StatusPending, d["status"])
			detail := w.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries/" + d["id"].(string), key: whKeyA}).data()
			assert.Contains(t, detail["request_body"], `"id":"`+d["event_id"].(string)+`"`, "its event")
			if d["event_id"] != fx.KeyedEvent {
				assert.Contains(t, detail["request_body"], `"note":"<&>"`, "its event, byte for byte")
			}
		}
	}
	assert.Equal(t, fx.KeyedEvent, w.whPublish(t, whStoreA, whKeyA, whOrder("o3", "completed"), fx.Key), "the Idempotency-Key")
	depth, err := w.app.srv.hooks.QueueDepth(t.Context())
	require.NoError(t, err)
	assert.Equal(t, len(fx.Endpoints)*len(fx.Events), depth, "the pending deliveries queued")

	rc := whNewReceiver(t, false, nil)
	w.whPatch(t, fx.Endpoints[0], map[string]any{"url": rc.URL})
	advance(w.app, 3*time.Hour) // past every next attempt
	w.app.srv.hooks.Poke()
	var got []string
	for range fx.Events {
		got = append(got, rc.next(t, whWait).header.Get("Webhook-Id"))
	}
	assert.ElementsMatch(t, fx.Events, got, "the pending deliveries of the first endpoint, sent")
}
