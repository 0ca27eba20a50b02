package main

// The contract tests: one table of black-box cases that check API.md
// through plain HTTP against the service run as a real process, for either
// build:
//
//	go test -run TestContract .                      # the native binary
//	go test -run TestContract . -args -target=wasm   # the edge module under the wazero host
//	DEEPLINK_TARGET=wasm go test -run TestContract . # the same
//
// Each case gets its own process on a fresh data_dir, a free port on
// 127.0.0.1 and a configuration file whose public_base_url is the
// process's own address. Cases that only make sense for one target (the
// edge module's fault handling) are in that target's table only.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	mrand "math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store/embedded"
)

var contractTargetFlag = flag.String("target", "", "target of TestContract: native or wasm (default $DEEPLINK_TARGET, else native)")

const (
	targetNative = "native"
	targetWasm   = "wasm"

	ctStoreA = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	ctStoreB = "0f8fad5b-d9cb-469f-a165-70867728950e"
	ctNoSuch = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	ctKeyA   = "ak_contract_store_a"
	ctKeyB   = "ak_contract_store_b"
	ctShopCB = "https://shop.example.com/cb"

	// ctCallTimeout is the host's -call-timeout for the fault cases.
	ctCallTimeout = 2 * time.Second
)

func contractTarget(t *testing.T) string {
	t.Helper()
	target := *contractTargetFlag
	if target == "" {
		target = os.Getenv("DEEPLINK_TARGET")
	}
	if target == "" {
		target = targetNative
	}
	if target != targetNative && target != targetWasm {
		t.Fatalf("-target=%q: want native or wasm", target)
	}
	return target
}

// ---- builds, once per test binary run ----

// ctTmp holds the binaries and the shared wazero compilation cache; TestMain
// removes it.
var ctTmp struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The slowest tests (crashes, replicas, leases running out, Chromium)
	// run processes of their own and mostly wait on them: unless -parallel
	// says otherwise, at least four of them run at once, however few the
	// cores.
	if !flagGiven("test.parallel") {
		flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0))))
	}
	var prebuilt sync.WaitGroup
	if flag.Lookup("test.run").Value.String() == "" {
		// The whole suite: the binaries it runs are built while the
		// first tests, which need none, run.
		prebuilt.Go(func() { buildNative() })
		prebuilt.Go(func() { buildWasm() })
	}
	code := m.Run()
	prebuilt.Wait() // done before their directory goes, even if no test needed them
	if ctTmp.dir != "" {
		os.RemoveAll(ctTmp.dir)
	}
	os.Exit(code)
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func contractTmpDir() (string, error) {
	ctTmp.once.Do(func() { ctTmp.dir, ctTmp.err = os.MkdirTemp("", "deeplink-contract-") })
	return ctTmp.dir, ctTmp.err
}

// ctArtifacts are what a target runs.
type ctArtifacts struct {
	native      string // the native binary
	host        string // the wazero host
	module      string // the edge module
	faultModule string // the edge module with the edgefault routes
	cache       string // the host's -cache, shared by every run
}

var (
	nativeBuild struct {
		once sync.Once
		a    ctArtifacts
		err  error
	}
	wasmBuild struct {
		once   sync.Once
		a      ctArtifacts
		err    error
		linked map[string]bool // the symbols the module's linker kept
	}
)

func ctGoBuild(env []string, args ...string) error {
	_, err := ctGoBuildOutput(env, args...)
	return err
}

// ctGoBuildOutput is ctGoBuild returning what go build printed.
func ctGoBuildOutput(env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func buildNative() (ctArtifacts, error) {
	nativeBuild.once.Do(func() {
		dir, err := contractTmpDir()
		if err != nil {
			nativeBuild.err = err
			return
		}
		bin := filepath.Join(dir, "deeplink")
		nativeBuild.err = ctGoBuild(nil, "-o", bin, ".")
		nativeBuild.a = ctArtifacts{native: bin}
	})
	return nativeBuild.a, nativeBuild.err
}

// buildWasm builds the host and both modules in parallel, then starts the
// host once on each module so that the cases find them in the compilation
// cache instead of compiling them several at a time.
func buildWasm() (ctArtifacts, error) {
	wasmBuild.once.Do(func() {
		dir, err := contractTmpDir()
		if err != nil {
			wasmBuild.err = err
			return
		}
		a := ctArtifacts{
			host:        filepath.Join(dir, "host"),
			module:      filepath.Join(dir, "service.wasm"),
			faultModule: filepath.Join(dir, "service-edgefault.wasm"),
			cache:       filepath.Join(dir, "wazero-cache"),
		}
		wasip1 := []string{"GOOS=wasip1", "GOARCH=wasm"}
		// As `go generate ./wasm` builds wasm/service.wasm.
		module := []string{"-buildmode=c-shared", "-trimpath"}
		errs := make([]error, 3)
		var wg sync.WaitGroup
		// A version of its own: the delivery log, which the module
		// shows, must name what the host sends (webhooks case below).
		wg.Go(func() { errs[0] = ctGoBuild(nil, "-ldflags=-X=main.version="+ctHostVersion, "-o", a.host, "./wasm") })
		wg.Go(func() {
			// -dumpdep: the linker lists what reached what it kept
			// (the edge case "the module links no network client").
			var out []byte
			out, errs[1] = ctGoBuildOutput(wasip1, slices.Concat(module, []string{"-ldflags=-s -dumpdep", "-tags", "nethttpomithttp2", "-o", a.module, "."})...)
			wasmBuild.linked = map[string]bool{}
			for line := range strings.Lines(string(out)) {
				if _, to, ok := strings.Cut(strings.TrimSpace(line), " -> "); ok {
					wasmBuild.linked[strings.TrimSuffix(to, " <UsedInIface>")] = true
				}
			}
		})
		wg.Go(func() {
			errs[2] = ctGoBuild(wasip1, slices.Concat(module, []string{"-ldflags=-s", "-tags", "nethttpomithttp2,edgefault", "-o", a.faultModule, "."})...)
		})
		wg.Wait()
		if wasmBuild.err = errors.Join(errs...); wasmBuild.err != nil {
			return
		}
		for i, m := range []string{a.module, a.faultModule} {
			wg.Go(func() { errs[i] = ctWarmCache(a, m) })
		}
		wg.Wait()
		wasmBuild.a, wasmBuild.err = a, errors.Join(errs...)
	})
	return wasmBuild.a, wasmBuild.err
}

// ctWarmCache runs the host on module until it is healthy, then stops it.
func ctWarmCache(a ctArtifacts, module string) error {
	dir, err := os.MkdirTemp(filepath.Dir(a.cache), "warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr, err := ctFreeAddr()
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.json")
	body := `{"stores":[{"id":"` + ctStoreA + `","name":"warm","api_keys":["` + ctKeyA + `"],"redirect_domains":["shop.example.com"]}]}`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		return err
	}
	p, err := ctLaunch([]string{a.host, "-config", cfg, "-module", module, "-addr", addr,
		"-data", filepath.Join(dir, "data"), "-cache", a.cache}, filepath.Join(dir, "log"))
	if err != nil {
		return err
	}
	if err := p.waitReady("http://"+addr, 3*time.Minute); err != nil {
		p.cmd.Process.Kill()
		<-p.exited
		return err
	}
	return p.terminate(30 * time.Second)
}

// ---- processes ----

// proc is one run of the service.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when it has exited; err is then set
	err     error
	logPath string
}

// ctLaunch starts argv with its output appended to logPath.
func ctLaunch(argv []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return ctLaunchTo(argv, logf, logPath)
}

// ctLaunchTo is ctLaunch with standard output and error going to logf,
// which it closes once the process has exited; logPath is only for the
// tail of an error.
func ctLaunchTo(argv []string, logf *os.File, logPath string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls base/readyz until it answers 200, the process exits
// or within passes.
func (p *proc) waitReady(base string, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.Get(base + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before it was healthy: %v\n%s", p.err, ctTail(p.logPath))
		case <-deadline.C:
			return fmt.Errorf("not healthy within %v\n%s", within, ctTail(p.logPath))
		case <-tick.C:
		}
	}
}

// terminate sends SIGTERM and waits for exit code 0.
func (p *proc) terminate(within time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.exited:
	case <-time.After(within):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("still running %v after SIGTERM\n%s", within, ctTail(p.logPath))
	}
	if p.err != nil {
		return fmt.Errorf("exit after SIGTERM: %v (want code 0)\n%s", p.err, ctTail(p.logPath))
	}
	return nil
}

// ctTail is the end of a log file, for failure messages.
func ctTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

func ctFreeAddr() (string, error) {
	ctPorts.Lock()
	defer ctPorts.Unlock()
	for range 1000 {
		// Below Linux's ephemeral range (32768 and up by default): a port
		// the kernel picked for us, closed, and given to the service a
		// moment later could meanwhile be handed to any other socket of
		// this test binary, an outgoing connection's included. Here only
		// an explicit bind can take it, and this process hands each out
		// once.
		port := 20000 + mrand.IntN(12768)
		if ctPorts.used[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ln.Close()
		ctPorts.used[port] = true
		return ln.Addr().String(), nil
	}
	return "", errors.New("no free port in 20000-32767")
}

// ctHostVersion is the version the contract tests' edge host is built
// with (-X main.version).
const ctHostVersion = "contract-host"

// ctPorts are the ports ctFreeAddr has handed out.
var ctPorts = struct {
	sync.Mutex
	used map[int]bool
}{used: map[int]bool{}}

// ---- the service under test ----

// ctOpts are what a case needs of its configuration and target.
type ctOpts struct {
	retry       []string      // webhooks.retry_schedule; default 50ms, 50ms
	apps        bool          // configure the association files
	faults      bool          // wasm: the edgefault module, -call-timeout ctCallTimeout
	callTimeout time.Duration // wasm, with faults: -call-timeout instead of ctCallTimeout

	// redisURL, when set, keeps the state on that Redis (storage.backend
	// "redis") under redisPrefix; when empty, $DEEPLINK_STORAGE=redis
	// gives each native case a Redis of its own (ctRedis), but those that
	// are about data_dir (embeddedOnly).
	redisURL, redisPrefix string
	embeddedOnly          bool
	onRedis               bool // a Redis of its own (ctRedis), on either target
	noWait                bool // start without waiting for /readyz 200
	// loadTest raises the per-key request budget past any load a test
	// makes (a load test is not about the budget, and on a fast machine
	// would meet it), and trusts the loopback as a proxy, so that the
	// test's requests may name clients of their own (X-Forwarded-For).
	loadTest      bool
	publicBaseURL string // another's than the service's own URL: a replica's behind one name
}

// ctStorageEnv names the backend TestContract runs its native cases on:
// "redis", or anything else for the embedded one.
const ctStorageEnv = "DEEPLINK_STORAGE"

// ctRedis starts a Redis of the test's own and returns its URL. It is
// set in replicas_test.go, a file of the native build alone (the Redis
// test helper does not build for wasip1); nil leaves every case on the
// embedded store.
var ctRedis func(t *testing.T) string

// ctService is the service running as a process for one case, with a game
// app (spec §4.1) that store A's game_authorize_url points at.
type ctService struct {
	t      *testing.T
	target string
	URL    string // http://127.0.0.1:PORT, also the public_base_url
	game   *httptest.Server
	argv   []string
	log    string
	client *http.Client // does not follow redirects
	p      *proc
}

func startContractService(t *testing.T, target string, o ctOpts) *ctService {
	t.Helper()
	var art ctArtifacts
	var err error
	if target == targetWasm {
		art, err = buildWasm()
	} else {
		art, err = buildNative()
	}
	require.NoError(t, err, "building the %s target", target)

	dir := t.TempDir()
	addr, err := ctFreeAddr()
	require.NoError(t, err)
	s := &ctService{t: t, target: target, URL: "http://" + addr, log: filepath.Join(dir, "service.log")}
	// Registered before the cleanup that stops the service, so it runs
	// after it, on the whole log (and before dir is removed).
	t.Cleanup(func() { ctCheckRequestLines(t, s.log) })
	s.client = &http.Client{
		Transport:     &http.Transport{},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
	s.game = httptest.NewServer(&ctGame{svc: s})
	t.Cleanup(s.game.Close)

	data := filepath.Join(dir, "data")
	storage := map[string]any{}
	if o.redisURL == "" && (o.onRedis || !o.embeddedOnly && target == targetNative && os.Getenv(ctStorageEnv) == "redis") {
		if ctRedis == nil {
			t.Skip("this build of the tests has no Redis")
		}
		o.redisURL, o.redisPrefix = ctRedis(t), "contract:"
	}
	if o.redisURL != "" {
		storage = map[string]any{"backend": "redis", "redis_url": o.redisURL, "redis_prefix": o.redisPrefix}
	}
	if o.retry == nil {
		o.retry = []string{"50ms", "50ms"}
	}
	apps := map[string]any{}
	if o.apps {
		apps = map[string]any{
			"apple":   []map[string]any{{"app_id": "TEAMID.com.example.game", "paths": []string{"/oauth/authorize"}}},
			"android": []map[string]any{{"package_name": "com.example.game", "sha256_cert_fingerprints": []string{"AB:CD:EF"}}},
		}
	}
	fairness, proxies := map[string]any{}, []string{}
	if o.loadTest {
		fairness = map[string]any{"key_rate": 1e9, "key_burst": 1e9}
		proxies = []string{"127.0.0.1/32"} // the test's requests may name clients of their own
	}
	cfg, err := json.Marshal(map[string]any{
		"fairness":        fairness,
		"trusted_proxies": proxies,
		"listen":          addr,
		"data_dir":        data,
		"public_base_url": cmp.Or(o.publicBaseURL, s.URL),
		"webhooks": map[string]any{
			"timeout":             "5s",
			"retry_schedule":      o.retry,
			"allow_insecure_urls": true,
		},
		"stores": []map[string]any{{
			"id":                 ctStoreA,
			"name":               "Store A",
			"api_keys":           []string{ctKeyA},
			"redirect_domains":   []string{"shop.example.com", "127.0.0.1"},
			"game_authorize_url": s.game.URL + "/oauth/authorize",
		}, {
			"id":               ctStoreB,
			"name":             "Store B",
			"api_keys":         []string{ctKeyB},
			"redirect_domains": []string{"shop.example.com"},
		}},
		"apps":    apps,
		"storage": storage,
	})
	require.NoError(t, err)
	cfgFile := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(cfgFile, cfg, 0o600))

	switch target {
	case targetNative:
		s.argv = []string{art.native, "-config", cfgFile, "-addr", addr, "-data", data}
	case targetWasm:
		module := art.module
		timeout := 10 * time.Second
		if o.faults {
			module, timeout = art.faultModule, cmp.Or(o.callTimeout, ctCallTimeout)
		}
		s.argv = []string{art.host, "-config", cfgFile, "-module", module, "-addr", addr,
			"-data", data, "-cache", art.cache, "-call-timeout", timeout.String()}
	}
	t.Cleanup(func() {
		if s.p != nil {
			select {
			case <-s.p.exited:
			default:
				s.p.cmd.Process.Kill()
				<-s.p.exited
			}
		}
		if t.Failed() {
			t.Logf("service log (%s):\n%s", s.target, ctTail(s.log))
		}
	})
	if o.noWait {
		s.launch()
	} else {
		s.start()
	}
	return s
}

// launch runs the service on its data directory (or Redis) without
// waiting for it to be ready.
func (s *ctService) launch() {
	s.t.Helper()
	p, err := ctLaunch(s.argv, s.log)
	require.NoError(s.t, err)
	s.p = p
}

// start runs the service on its data directory and waits for /readyz.
func (s *ctService) start() {
	s.t.Helper()
	s.launch()
	require.NoError(s.t, s.p.waitReady(s.URL, time.Minute))
}

// stop ends the service as an operator does: SIGTERM, then exit code 0.
func (s *ctService) stop() {
	s.t.Helper()
	require.NoError(s.t, s.p.terminate(30*time.Second))
	s.client.CloseIdleConnections()
}

// restart stops the service and starts it again on the same data_dir and
// address.
func (s *ctService) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// ---- HTTP ----

type ctResp struct {
	status int
	header http.Header
	body   []byte
	resp   *http.Response
}

// do sends a request to the service. body is sent as is when it is a
// string or []byte, as JSON otherwise; hdr are name, value pairs (after
// the Content-Type do sets, so they may replace it).
func (s *ctService) do(t *testing.T, method, path string, body any, hdr ...string) ctResp {
	t.Helper()
	r, err := s.send(method, path, body, hdr...)
	require.NoError(t, err, "%s %s", method, path)
	return r
}

// send is do returning a failure to send the request or read the answer
// rather than failing the test: for requests a crash may cut.
func (s *ctService) send(method, path string, body any, hdr ...string) (ctResp, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return ctResp{}, err
		}
		raw = j
	}
	u := path
	if !strings.HasPrefix(u, "http") {
		u = s.URL + path
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return ctResp{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return ctResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return ctResp{}, err
	}
	r := ctResp{status: resp.StatusCode, header: resp.Header, body: b, resp: resp}
	// The service's answers (not the game app's), but for the edge
	// build's test-only fault routes, are the document's.
	if strings.HasPrefix(u, s.URL+"/") && !strings.HasPrefix(req.URL.Path, "/__fault/") {
		if err := ctCheckOpenAPI(method, u, req.Header, raw, r); err != nil {
			s.t.Errorf("%s %s: %v", method, u, err)
		}
	}
	return r, nil
}

// data decodes {"data": ...} of a 2xx answer.
func (r ctResp) data(t *testing.T) map[string]any {
	t.Helper()
	var v struct {
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &v), "body %s", r.body)
	return v.Data
}

// ctStatus checks the status and that the body is JSON.
func ctStatus(t *testing.T, r ctResp, status int) {
	t.Helper()
	require.Equal(t, status, r.status, "body %s", r.body)
	if status == http.StatusNoContent {
		return
	}
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "application/json", mt)
	require.True(t, json.Valid(r.body), "body %s", r.body)
}

// ctError checks an API.md §3 error and returns the invalid fields it
// names.
func ctError(t *testing.T, r ctResp, status int, code string) []string {
	t.Helper()
	ctStatus(t, r, status)
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Fields  []struct {
				Field   string `json:"field"`
				Message string `json:"message"`
			} `json:"fields"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e))
	require.NotNil(t, e.Error, "body %s", r.body)
	if code != "" {
		require.Equal(t, code, e.Error.Code, "body %s", r.body)
	}
	require.NotEmpty(t, e.Error.Message)
	var fields []string
	for _, f := range e.Error.Fields {
		assert.NotEmpty(t, f.Message, "message of %s", f.Field)
		fields = append(fields, f.Field)
	}
	return fields
}

// ctTokenError checks an OAuth error of the token endpoint.
func ctTokenError(t *testing.T, r ctResp, code string) {
	t.Helper()
	ctStatus(t, r, http.StatusBadRequest)
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e))
	require.Equal(t, code, e.Error, "body %s", r.body)
}

// ---- sign-in helpers ----

func ctRandom() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func ctChallenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// ctCode is a registration: its code and the verifier of its challenge.
type ctCode struct{ code, verifier, store, key string }

func newCTCode(store, key string) ctCode {
	return ctCode{code: ctRandom(), verifier: ctRandom(), store: store, key: key}
}

func (c ctCode) body() map[string]any {
	return map[string]any{
		"auth_code":           c.code,
		"redirect_uri":        ctShopCB,
		"client_reference_id": "player-42",
		"code_challenge":      ctChallenge(c.verifier),
		"state":               "st-" + c.code[:8],
		"first_name":          "Ada",
		"last_name":           "Lovelace",
		"language":            "pt-BR",
		"currency":            "EUR",
		"country":             "PT",
		"timezone":            "Europe/Lisbon",
	}
}

func (s *ctService) register(t *testing.T, c ctCode) ctResp {
	t.Helper()
	return s.do(t, http.MethodPost, "/stores/"+c.store+"/auth/auth-code", c.body(), "X-API-Key", c.key)
}

// metrics scrapes /metrics (API.md §7).
func (s *ctService) metrics(t *testing.T) string {
	t.Helper()
	r := s.do(t, http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, r.status, "/metrics: %s", r.body)
	assert.Contains(t, r.header.Get("Content-Type"), "text/plain", "/metrics Content-Type")
	return string(r.body)
}

// ctMetric is the value of series in the scrape m, 0 when m has none.
func ctMetric(t *testing.T, m, series string) float64 {
	t.Helper()
	for line := range strings.Lines(m) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, "%s", line)
			return f
		}
	}
	return 0
}

// ctRegisterSeries is the counter of registrations answered status.
func ctRegisterSeries(status int) string {
	return fmt.Sprintf(`deeplink_http_requests_total{method="POST",route="/stores/{store_id}/auth/auth-code",status="%d"}`, status)
}

func (s *ctService) mustRegister(t *testing.T) ctCode {
	t.Helper()
	c := newCTCode(ctStoreA, ctKeyA)
	r := s.register(t, c)
	ctStatus(t, r, http.StatusOK)
	require.Equal(t, map[string]any{"status": "ok"}, r.data(t))
	return c
}

// redeem exchanges c at store as the webshop does, with a form body.
func (s *ctService) redeem(t *testing.T, store string, c ctCode) ctResp {
	t.Helper()
	return s.do(t, http.MethodPost, "/stores/"+store+"/auth/token", c.tokenForm(),
		"Content-Type", "application/x-www-form-urlencoded")
}

// tokenForm is the body of c's exchange at the token endpoint.
func (c ctCode) tokenForm() string {
	return url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {c.code},
		"redirect_uri":  {ctShopCB},
		"code_verifier": {c.verifier},
		"client_id":     {"ignored"},
	}.Encode()
}

// ctToken checks a successful exchange and returns the access token.
func ctToken(t *testing.T, r ctResp) string {
	t.Helper()
	ctStatus(t, r, http.StatusOK)
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	var tok struct {
		AccessToken string            `json:"access_token"`
		TokenType   string            `json:"token_type"`
		ExpiresIn   int64             `json:"expires_in"`
		Player      map[string]string `json:"player"`
	}
	require.NoError(t, json.Unmarshal(r.body, &tok))
	require.NotEmpty(t, tok.AccessToken)
	assert.Equal(t, "Bearer", tok.TokenType)
	assert.EqualValues(t, 86400, tok.ExpiresIn)
	assert.Equal(t, map[string]string{
		"client_reference_id": "player-42", "first_name": "Ada", "last_name": "Lovelace",
		"language": "pt-BR", "currency": "EUR", "country": "PT", "timezone": "Europe/Lisbon",
	}, tok.Player)
	return tok.AccessToken
}

func (s *ctService) me(t *testing.T, store, token string) ctResp {
	t.Helper()
	if token == "" {
		return s.do(t, http.MethodGet, "/stores/"+store+"/auth/me", nil)
	}
	return s.do(t, http.MethodGet, "/stores/"+store+"/auth/me", nil, "Authorization", "Bearer "+token)
}

// ctGame is the game app of spec §4.1: it registers a fresh code for the
// deep link's challenge and state and sends the browser back to the
// redirect_uri with code and state.
type ctGame struct{ svc *ctService }

func (g *ctGame) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	code := ctRandom()
	err := postRegistration(g.svc.client, g.svc.URL, q.Get("store_id"), ctKeyA, map[string]string{
		"auth_code":           code,
		"redirect_uri":        q.Get("redirect_uri"),
		"client_reference_id": "player-42",
		"code_challenge":      q.Get("code_challenge"),
		"state":               q.Get("state"),
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	bq := back.Query()
	bq.Set("code", code)
	bq.Set("state", q.Get("state"))
	back.RawQuery = bq.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// ctCookieHeader is the Cookie header a browser would send back for the
// cookies r sets. The service's cookies are Secure, which a cookie jar
// keeps from a plain-HTTP test server, so the test sends them itself.
func ctCookieHeader(r ctResp) string {
	var parts []string
	for _, c := range r.resp.Cookies() {
		if c.MaxAge >= 0 && c.Value != "" {
			parts = append(parts, c.Name+"="+c.Value)
		}
	}
	return strings.Join(parts, "; ")
}

// linkToCallback opens the link, goes through the game app and returns the
// link's cookies and the callback URL the game app sent the browser to.
func (s *ctService) linkToCallback(t *testing.T, returnTo string) (cookie, callback string) {
	t.Helper()
	link := s.do(t, http.MethodGet, "/stores/"+ctStoreA+"/auth/link?return_to="+url.QueryEscape(returnTo), nil)
	require.Equal(t, http.StatusFound, link.status, "link: %s", link.body)
	cookie = ctCookieHeader(link)
	require.NotEmpty(t, cookie, "the link sets a cookie")
	toGame := link.header.Get("Location")
	require.True(t, strings.HasPrefix(toGame, s.game.URL+"/oauth/authorize?"), "link redirects to %q", toGame)
	back := s.do(t, http.MethodGet, toGame, nil)
	require.Equal(t, http.StatusFound, back.status, "game app: %s", back.body)
	callback = back.header.Get("Location")
	require.True(t, strings.HasPrefix(callback, s.URL+"/stores/"+ctStoreA+"/auth/callback?"), "game app redirects to %q", callback)
	return cookie, callback
}

// ---- webhook helpers ----

// ctReceiver is a merchant's webhook endpoint on 127.0.0.1.
type ctReceiver struct {
	*httptest.Server
	status func(n int) int // the answer to the nth request, from 1
	t      *testing.T      // fails when a request is not as openapi.json's webhooks say

	mu   sync.Mutex
	hits []ctHit
}

type ctHit struct {
	header http.Header
	body   []byte
	status int
	at     time.Time // when it arrived
}

func newCTReceiver(t *testing.T, status func(n int) int) *ctReceiver {
	rc := &ctReceiver{status: status, t: t}
	rc.Server = httptest.NewServer(rc)
	t.Cleanup(rc.Close)
	return rc
}

// ServeHTTP records the request and answers it with its status. The
// answer is buffered: it goes out once the caller's handler returns.
func (rc *ctReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if err := ctCheckWebhookOpenAPI(r.Header, b); err != nil {
		rc.t.Errorf("a delivery to %s: %v", rc.URL, err)
	}
	rc.mu.Lock()
	n := len(rc.hits) + 1
	st := rc.status(n)
	rc.hits = append(rc.hits, ctHit{header: r.Header.Clone(), body: b, status: st, at: time.Now()})
	rc.mu.Unlock()
	w.WriteHeader(st)
	fmt.Fprintf(w, "answer %d", n)
}

func ctNewReceiverOK(t *testing.T) *ctReceiver { return newCTReceiver(t, ctAlways(http.StatusOK)) }

// ctHoldingReceiver answers nothing until the test ends or the client
// gives up; held counts the requests it got, dropped those the client
// gave up.
type ctHoldingReceiver struct {
	*httptest.Server
	held, dropped atomic.Int64
}

func newCTHoldingReceiver(t *testing.T) *ctHoldingReceiver {
	release := make(chan struct{})
	rc := &ctHoldingReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // so that the server notices the client going
		rc.held.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			rc.dropped.Add(1)
		}
	}))
	t.Cleanup(func() { close(release); rc.Close() })
	return rc
}

func ctAlways(status int) func(int) int { return func(int) int { return status } }

func (rc *ctReceiver) got() []ctHit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.hits)
}

func ctHooks(rest string) string { return "/stores/" + ctStoreA + "/webhooks" + rest }

// createEndpoint creates an endpoint for order.status.updated at u and
// returns its id and secret.
func (s *ctService) createEndpoint(t *testing.T, u string) (id, secret string) {
	t.Helper()
	r := s.do(t, http.MethodPost, ctHooks(""), map[string]any{
		"url": u, "description": "orders", "events": []string{"order.status.updated"},
	}, "X-API-Key", ctKeyA)
	ctStatus(t, r, http.StatusCreated)
	d := r.data(t)
	id, _ = d["id"].(string)
	secret, _ = d["secret"].(string)
	require.True(t, strings.HasPrefix(id, "we_"), "id %q", id)
	require.True(t, strings.HasPrefix(secret, "whsec_"), "secret %q", secret)
	return id, secret
}

// publish publishes order.status.updated for order and returns the event id.
func (s *ctService) publish(t *testing.T, order string, hdr ...string) string {
	t.Helper()
	r := s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/events", map[string]any{
		"type": "order.status.updated",
		"data": map[string]any{"object": map[string]any{"id": order, "status": "completed"}},
	}, append([]string{"X-API-Key", ctKeyA}, hdr...)...)
	ctStatus(t, r, http.StatusAccepted)
	id, _ := r.data(t)["id"].(string)
	require.True(t, strings.HasPrefix(id, "evt_"), "id %q", id)
	return id
}

// deliveries is an endpoint's delivery log, newest first.
func (s *ctService) deliveries(t *testing.T, endpoint string) []map[string]any {
	t.Helper()
	r := s.do(t, http.MethodGet, ctHooks("/"+endpoint+"/deliveries"), nil, "X-API-Key", ctKeyA)
	ctStatus(t, r, http.StatusOK)
	var v struct {
		Data []map[string]any `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.body, &v))
	return v.Data
}

// ctEventually polls cond every 20 ms for up to within.
func ctEventually(t *testing.T, within time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, within, 20*time.Millisecond, append([]any{msg}, args...)...)
}

// ctVerifySignature checks X-Webhook-Signature (API.md §5.1) and the
// Standard Webhooks headers of a delivery against secret.
func ctVerifySignature(t *testing.T, h ctHit, secret string) {
	t.Helper()
	sig := h.header.Get("X-Webhook-Signature")
	var ts string
	var v1 []string
	for _, part := range strings.Split(sig, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			v1 = append(v1, v)
		}
	}
	require.NotEmpty(t, ts, "X-Webhook-Signature %q", sig)
	sec, err := strconv.ParseInt(ts, 10, 64)
	require.NoError(t, err)
	// As a receiver checks it: against its clock when the request came
	// (a long test verifies its first deliveries minutes later).
	at := cmp.Or(h.at, time.Now())
	assert.InDelta(t, at.Unix(), sec, 60, "signed timestamp")
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(h.body)))
	want := hex.EncodeToString(mac.Sum(nil))
	assert.Contains(t, v1, want, "X-Webhook-Signature %q", sig)

	// Standard Webhooks: HMAC keyed with the secret's base64 part over
	// id.timestamp.body, as "v1,<base64>".
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	id, stdTS := h.header.Get("webhook-id"), h.header.Get("webhook-timestamp")
	require.NotEmpty(t, id)
	require.NotEmpty(t, stdTS)
	mac = hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + stdTS + "." + string(h.body)))
	assert.Contains(t, strings.Fields(h.header.Get("webhook-signature")), "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// ---- the table ----

// contractCase is one row of the contract: a name, the targets it applies
// to (nil: every target), what it needs of its service, and the check.
type contractCase struct {
	name    string
	targets []string
	opts    ctOpts
	run     func(t *testing.T, svc *ctService)
}

// contractTable is the table of target: every case that applies to it.
func contractTable(target string) []contractCase {
	var table []contractCase
	for _, c := range contractCases() {
		if c.targets == nil || slices.Contains(c.targets, target) {
			table = append(table, c)
		}
	}
	return table
}

func TestContract(t *testing.T) {
	target := contractTarget(t)
	t.Logf("target %s", target)
	for _, c := range contractTable(target) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, startContractService(t, target, c.opts))
		})
	}
}

// ctRequestFields are the fields of every request's log line (API.md §7:
// one JSON line per request), whoever answered it: a handler, the start-up
// or shutdown answers, the edge host while its module starts.
var ctRequestFields = []string{"bytes", "duration", "level", "method", "msg", "path", "request_id", "route", "status", "time"}

// ctCheckRequestLines checks that every request line in the log at path
// has exactly ctRequestFields.
func ctCheckRequestLines(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return // never started
	}
	require.NoError(t, err)
	lines := bytes.Split(b, []byte("\n"))
	for _, line := range lines[:len(lines)-1] { // the last is empty, or cut short by a kill
		var m map[string]any
		if json.Unmarshal(line, &m) != nil || m["msg"] != "request" {
			continue
		}
		if keys := slices.Sorted(maps.Keys(m)); !slices.Equal(keys, ctRequestFields) {
			t.Errorf("request log line with fields %v; want %v: %s", keys, ctRequestFields, line)
			return
		}
	}
}

// TestContractTables checks the tables themselves: unique names, every
// case in some table, the fault cases in the wasm table only, and every
// case in the wasm table but the native/ ones, where the builds differ on
// purpose (docs/api.md).
func TestContractTables(t *testing.T) {
	names := map[string]bool{}
	for _, c := range contractCases() {
		require.False(t, names[c.name], "duplicate case %q", c.name)
		names[c.name] = true
		for _, target := range c.targets {
			require.Contains(t, []string{targetNative, targetWasm}, target, "case %q", c.name)
		}
	}
	native, wasm := contractTable(targetNative), contractTable(targetWasm)
	for _, c := range native {
		assert.False(t, strings.HasPrefix(c.name, "fault/"), "%s is not for the native build", c.name)
	}
	onWasm := map[string]bool{}
	for _, c := range wasm {
		onWasm[c.name] = true
		assert.False(t, strings.HasPrefix(c.name, "native/"), "%s is not for the wasm build", c.name)
	}
	for name := range names {
		assert.True(t, onWasm[name] || strings.HasPrefix(name, "native/"), "%s applies to wasm too, or is named native/", name)
	}
}

func contractCases() []contractCase {
	wasmOnly := []string{targetWasm}
	nativeOnly := []string{targetNative}
	return []contractCase{
		// §4.1 register and the §3 rows.
		{name: "register/ok", run: func(t *testing.T, s *ctService) {
			s.mustRegister(t)
			// Parameters on the media type are fine.
			c := newCTCode(ctStoreA, ctKeyA)
			r := s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", c.body(),
				"X-API-Key", ctKeyA, "Content-Type", "application/json; charset=utf-8")
			ctStatus(t, r, http.StatusOK)
		}},
		{name: "register/400 invalid_json", run: func(t *testing.T, s *ctService) {
			for _, body := range []string{"{", "[1,2]", `"code"`, "null"} {
				ctError(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", body, "X-API-Key", ctKeyA),
					http.StatusBadRequest, "invalid_json")
			}
		}},
		{name: "register/400 redirect_uri_not_allowed", run: func(t *testing.T, s *ctService) {
			c := newCTCode(ctStoreA, ctKeyA)
			b := c.body()
			b["redirect_uri"] = "https://evil.example.net/cb"
			ctError(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", b, "X-API-Key", ctKeyA),
				http.StatusBadRequest, "redirect_uri_not_allowed")
		}},
		{name: "register/401 unauthorized", run: func(t *testing.T, s *ctService) {
			c := newCTCode(ctStoreA, ctKeyA)
			p := "/stores/" + ctStoreA + "/auth/auth-code"
			ctError(t, s.do(t, http.MethodPost, p, c.body()), http.StatusUnauthorized, "unauthorized")
			ctError(t, s.do(t, http.MethodPost, p, c.body(), "X-API-Key", "ak_wrong"), http.StatusUnauthorized, "unauthorized")
			// Another store's key is not this store's.
			ctError(t, s.do(t, http.MethodPost, p, c.body(), "X-API-Key", ctKeyB), http.StatusUnauthorized, "unauthorized")
		}},
		{name: "register/404 store_not_found before the key", run: func(t *testing.T, s *ctService) {
			c := newCTCode(ctNoSuch, "")
			p := "/stores/" + ctNoSuch + "/auth/auth-code"
			ctError(t, s.do(t, http.MethodPost, p, c.body()), http.StatusNotFound, "store_not_found")
			ctError(t, s.do(t, http.MethodPost, p, c.body(), "X-API-Key", ctKeyA), http.StatusNotFound, "store_not_found")
		}},
		{name: "register/409 auth_code_conflict keeps the first", run: func(t *testing.T, s *ctService) {
			first := s.mustRegister(t)
			second := first
			second.verifier = ctRandom()
			ctError(t, s.register(t, second), http.StatusConflict, "auth_code_conflict")
			ctToken(t, s.redeem(t, ctStoreA, first))
		}},
		{name: "register/413 body_too_large", run: func(t *testing.T, s *ctService) {
			c := newCTCode(ctStoreA, ctKeyA)
			b := c.body()
			b["padding"] = strings.Repeat("x", 65<<10)
			ctError(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", b, "X-API-Key", ctKeyA),
				http.StatusRequestEntityTooLarge, "body_too_large")
		}},
		{name: "register/415 unsupported_media_type", run: func(t *testing.T, s *ctService) {
			c := newCTCode(ctStoreA, ctKeyA)
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded"} {
				ctError(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", c.body(), "X-API-Key", ctKeyA, "Content-Type", ct),
					http.StatusUnsupportedMediaType, "unsupported_media_type")
			}
		}},
		{name: "register/422 lists every invalid field", run: func(t *testing.T, s *ctService) {
			body := map[string]any{
				"auth_code":           "short",
				"redirect_uri":        "ftp://shop.example.com/cb",
				"client_reference_id": "",
				"code_challenge":      "abc",
				"first_name":          strings.Repeat("a", 256),
				"language":            "much-too-long-tag",
				"currency":            "eur",
				"country":             "PRT",
				"timezone":            "Mars/Olympus_Mons",
			} // state is missing
			fields := ctError(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/auth-code", body, "X-API-Key", ctKeyA),
				http.StatusUnprocessableEntity, "validation_failed")
			assert.ElementsMatch(t, []string{"auth_code", "redirect_uri", "client_reference_id", "code_challenge", "state",
				"first_name", "language", "currency", "country", "timezone"}, fields)
		}},

		// §4.2 token, §4.3 me.
		{name: "token/exchange then replay revokes", run: func(t *testing.T, s *ctService) {
			c := s.mustRegister(t)
			token := ctToken(t, s.redeem(t, ctStoreA, c))
			me := s.me(t, ctStoreA, token)
			ctStatus(t, me, http.StatusOK)
			player, _ := me.data(t)["player"].(map[string]any)
			assert.Equal(t, "player-42", player["client_reference_id"])
			assert.Equal(t, "Europe/Lisbon", player["timezone"])

			ctTokenError(t, s.redeem(t, ctStoreA, c), "invalid_grant")
			ctError(t, s.me(t, ctStoreA, token), http.StatusUnauthorized, "")
		}},
		{name: "token/json body", run: func(t *testing.T, s *ctService) {
			c := s.mustRegister(t)
			ctToken(t, s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/auth/token", map[string]string{
				"grant_type": "authorization_code", "code": c.code, "redirect_uri": ctShopCB, "code_verifier": c.verifier,
			}))
		}},
		{name: "token/invalid_grant for another store's code, a wrong verifier, an unknown code", run: func(t *testing.T, s *ctService) {
			b := newCTCode(ctStoreB, ctKeyB)
			ctStatus(t, s.register(t, b), http.StatusOK)
			ctTokenError(t, s.redeem(t, ctStoreA, b), "invalid_grant")

			c := s.mustRegister(t)
			wrong := c
			wrong.verifier = ctRandom()
			ctTokenError(t, s.redeem(t, ctStoreA, wrong), "invalid_grant")
			ctTokenError(t, s.redeem(t, ctStoreA, c), "invalid_grant") // consumed by the failed attempt
			ctTokenError(t, s.redeem(t, ctStoreA, newCTCode(ctStoreA, ctKeyA)), "invalid_grant")
		}},
		{name: "token/CORS preflight for the store's domains only", run: func(t *testing.T, s *ctService) {
			p := "/stores/" + ctStoreA + "/auth/token"
			ok := s.do(t, http.MethodOptions, p, nil, "Origin", "https://shop.example.com",
				"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type")
			assert.Contains(t, []int{http.StatusOK, http.StatusNoContent}, ok.status)
			assert.Equal(t, "https://shop.example.com", ok.header.Get("Access-Control-Allow-Origin"))
			assert.Contains(t, ok.header.Get("Access-Control-Allow-Methods"), "POST")
			foreign := s.do(t, http.MethodOptions, p, nil, "Origin", "https://evil.example.net", "Access-Control-Request-Method", "POST")
			assert.Empty(t, foreign.header.Get("Access-Control-Allow-Origin"))
		}},
		{name: "me/CORS for the store's domains only", run: func(t *testing.T, s *ctService) {
			p := "/stores/" + ctStoreA + "/auth/me"
			token := ctToken(t, s.redeem(t, ctStoreA, s.mustRegister(t)))
			for _, tt := range []struct {
				origin string
				allow  bool
			}{{"https://shop.example.com", true}, {"https://evil.example.net", false}} {
				pre := s.do(t, http.MethodOptions, p, nil, "Origin", tt.origin,
					"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization")
				get := s.do(t, http.MethodGet, p, nil, "Origin", tt.origin, "Authorization", "Bearer "+token)
				ctStatus(t, get, http.StatusOK)
				if !tt.allow {
					assert.Empty(t, pre.header.Get("Access-Control-Allow-Origin"), "preflight from %s", tt.origin)
					assert.Empty(t, get.header.Get("Access-Control-Allow-Origin"), "GET from %s", tt.origin)
					continue
				}
				assert.Contains(t, []int{http.StatusOK, http.StatusNoContent}, pre.status)
				assert.Equal(t, tt.origin, pre.header.Get("Access-Control-Allow-Origin"))
				assert.Contains(t, strings.ToLower(pre.header.Get("Access-Control-Allow-Headers")), "authorization")
				assert.Contains(t, pre.header.Get("Access-Control-Allow-Methods"), "GET")
				assert.Equal(t, tt.origin, get.header.Get("Access-Control-Allow-Origin"))
				assert.Contains(t, get.header.Values("Vary"), "Origin")
			}
		}},
		{name: "me/401 without a valid token of the store", run: func(t *testing.T, s *ctService) {
			ctError(t, s.me(t, ctStoreA, ""), http.StatusUnauthorized, "")
			ctError(t, s.me(t, ctStoreA, "not-a-token"), http.StatusUnauthorized, "")
			token := ctToken(t, s.redeem(t, ctStoreA, s.mustRegister(t)))
			ctError(t, s.me(t, ctStoreB, token), http.StatusUnauthorized, "")
			ctStatus(t, s.me(t, ctStoreA, token), http.StatusOK)
		}},

		// §4.4 the browser flow.
		{name: "link/302 to the game app with a Secure cookie", run: func(t *testing.T, s *ctService) {
			r := s.do(t, http.MethodGet, "/stores/"+ctStoreA+"/auth/link?return_to=/account", nil)
			require.Equal(t, http.StatusFound, r.status, "body %s", r.body)
			loc, err := url.Parse(r.header.Get("Location"))
			require.NoError(t, err)
			assert.Equal(t, s.game.URL+"/oauth/authorize", loc.Scheme+"://"+loc.Host+loc.Path)
			q := loc.Query()
			var keys []string
			for k, v := range q {
				keys = append(keys, k)
				assert.Len(t, v, 1, "values of %s", k)
			}
			assert.ElementsMatch(t, []string{"redirect_uri", "state", "code_challenge", "code_challenge_method", "store_id"}, keys)
			callback := s.URL + "/stores/" + ctStoreA + "/auth/callback"
			assert.Equal(t, callback, q.Get("redirect_uri"))
			assert.Contains(t, loc.RawQuery, "redirect_uri="+url.QueryEscape(callback), "percent-encoded")
			assert.NotEmpty(t, q.Get("state"))
			assert.Regexp(t, `^[A-Za-z0-9_-]{43}$`, q.Get("code_challenge"))
			assert.Equal(t, "S256", q.Get("code_challenge_method"))
			assert.Equal(t, ctStoreA, q.Get("store_id"))
			cookies := r.resp.Cookies()
			require.Len(t, cookies, 1)
			assert.True(t, cookies[0].HttpOnly, "HttpOnly")
			assert.True(t, cookies[0].Secure, "Secure")
			assert.Equal(t, http.SameSiteLaxMode, cookies[0].SameSite)
			ctError(t, s.do(t, http.MethodGet, "/stores/"+ctNoSuch+"/auth/link", nil), http.StatusNotFound, "store_not_found")
		}},
		{name: "callback/through the game app, then a replay fails", run: func(t *testing.T, s *ctService) {
			cookie, callback := s.linkToCallback(t, "/account?tab=orders")
			r := s.do(t, http.MethodGet, callback, nil, "Cookie", cookie)
			require.Equal(t, http.StatusFound, r.status, "body %s", r.body)
			assert.Equal(t, "/account?tab=orders", r.header.Get("Location"))
			session := ctCookieHeader(r)
			assert.NotEmpty(t, session, "a session cookie")
			for _, c := range r.resp.Cookies() {
				assert.True(t, c.HttpOnly && c.Secure, "cookie %s is HttpOnly and Secure", c.Name)
			}

			again := s.do(t, http.MethodGet, callback, nil, "Cookie", cookie)
			assert.Equal(t, http.StatusBadRequest, again.status)
			assert.NotEmpty(t, again.body, "a page that says what went wrong")
			assert.Empty(t, ctCookieHeader(again), "no session")
		}},
		{name: "callback/return_to must be relative", run: func(t *testing.T, s *ctService) {
			cookie, callback := s.linkToCallback(t, "https://evil.example.net/x")
			r := s.do(t, http.MethodGet, callback, nil, "Cookie", cookie)
			require.Equal(t, http.StatusFound, r.status, "body %s", r.body)
			assert.Equal(t, "/", r.header.Get("Location"))
		}},
		{name: "callback/400 without the link cookie", run: func(t *testing.T, s *ctService) {
			_, callback := s.linkToCallback(t, "/")
			r := s.do(t, http.MethodGet, callback, nil)
			assert.Equal(t, http.StatusBadRequest, r.status)
			assert.Empty(t, ctCookieHeader(r), "no session")
		}},

		// §4.5 and §7.
		{name: "well-known/200 when configured", opts: ctOpts{apps: true}, run: func(t *testing.T, s *ctService) {
			apple := s.do(t, http.MethodGet, "/.well-known/apple-app-site-association", nil)
			ctStatus(t, apple, http.StatusOK)
			assert.Contains(t, string(apple.body), "TEAMID.com.example.game")
			android := s.do(t, http.MethodGet, "/.well-known/assetlinks.json", nil)
			ctStatus(t, android, http.StatusOK)
			assert.Contains(t, string(android.body), "com.example.game")
		}},
		{name: "well-known/404 when not configured", run: func(t *testing.T, s *ctService) {
			for _, p := range []string{"/.well-known/apple-app-site-association", "/.well-known/assetlinks.json"} {
				ctError(t, s.do(t, http.MethodGet, p, nil), http.StatusNotFound, "not_found")
			}
		}},
		// §4.5 the dashboard's association check: the files fetched from
		// the game's host under the webhook egress rules (by the host, on
		// the edge build, which has no sockets of its own).
		{name: "dashboard/the association check fetches the game host's files", opts: ctOpts{apps: true}, run: func(t *testing.T, s *ctService) {
			own := s.do(t, http.MethodGet, "/.well-known/apple-app-site-association", nil) // right for the service's apps
			ctStatus(t, own, http.StatusOK)
			// While the check waits on the game's host, the service serves
			// on: an event published meanwhile is accepted at once (on the
			// edge build, the check must not hold the primary instance).
			published := make(chan string, 1)
			game := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/.well-known/apple-app-site-association":
					w.Header().Set("Content-Type", "application/json")
					w.Write(own.body)
				case "/.well-known/assetlinks.json":
					req, _ := http.NewRequest(http.MethodPost, s.URL+"/stores/"+ctStoreA+"/events",
						strings.NewReader(`{"type":"order.status.updated","data":{"object":{"id":"o-1","status":"completed"}}}`))
					req.Header.Set("X-API-Key", ctKeyA)
					req.Header.Set("Content-Type", "application/json")
					resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
					if err != nil {
						published <- err.Error()
					} else {
						resp.Body.Close()
						published <- resp.Status
					}
					http.Redirect(w, r, "https://www.example.com"+r.URL.Path, http.StatusMovedPermanently)
				default:
					http.NotFound(w, r)
				}
			}))
			t.Cleanup(game.Close)
			s.stop()
			ca := filepath.Join(t.TempDir(), "game-ca.pem")
			require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: game.Certificate().Raw}), 0o600))
			s.editConfig(t, func(c map[string]any) { c["webhooks"].(map[string]any)["trusted_ca_file"] = ca })
			workers := func() int { // started so far, in this log of every launch
				b, _ := os.ReadFile(s.log)
				return bytes.Count(b, []byte("a worker instance started"))
			}
			before := workers()
			if s.target == targetWasm {
				s.argv = append(s.argv, "-instances", "2") // the primary, and one for the rest
			}
			s.start()
			if s.target == targetWasm { // the check goes to the worker once it has started
				ctEventually(t, time.Minute, func() bool { return workers() > before }, "the worker instance started")
			}
			// The store's settings, not the file, hold its Game Authorize
			// URL once it has started (API.md §10).
			ctStatus(t, s.do(t, http.MethodPatch, "/stores/"+ctStoreA+"/settings",
				map[string]any{"game_authorize_url": game.URL + "/oauth/authorize"}, "X-API-Key", ctKeyA), http.StatusOK)
			d := newDashClient(t, s.URL)
			d.signIn(ctStoreA, ctKeyA)
			p := d.post("/dashboard/settings/check", nil)
			require.Equal(t, http.StatusOK, p.status, p.body)
			apple, android, ok := strings.Cut(p.body, "/.well-known/assetlinks.json</code>")
			require.True(t, ok, "the page names both files: %s", p.body)
			assert.Contains(t, apple, game.URL+"/.well-known/apple-app-site-association")
			assert.Contains(t, apple, "right:</span> reachable without a redirect")
			assert.Contains(t, apple, "right:</span> valid JSON")
			assert.NotContains(t, apple, "wrong:", "the service's own file, served over TLS by a host trusted_ca_file vouches for")
			assert.Contains(t, android, "answered 301 to https://www.example.com/.well-known/assetlinks.json")
			select {
			case got := <-published:
				assert.Equal(t, "202 Accepted", got, "an event published while the check waited")
			case <-time.After(30 * time.Second):
				t.Fatal("the game's host was never asked for assetlinks.json")
			}
		}},
		// §10 and §6: settings and keys are state like any other; a change
		// answered is kept through kill -9 (the embedded store's fsync; on
		// the edge build, the host's store).
		{name: "settings/changes answered survive kill -9", opts: ctOpts{embeddedOnly: true}, run: func(t *testing.T, s *ctService) {
			settings, keys := "/stores/"+ctStoreA+"/settings", "/stores/"+ctStoreA+"/api-keys"
			ctStatus(t, s.do(t, http.MethodPatch, settings, map[string]any{"name": "Renamed", "game_authorize_url": "mygame://authorize"}, "X-API-Key", ctKeyA), http.StatusOK)
			kept := s.do(t, http.MethodPost, keys, map[string]any{"label": "kept"}, "X-API-Key", ctKeyA)
			ctStatus(t, kept, http.StatusCreated)
			revoked := s.do(t, http.MethodPost, keys, map[string]any{}, "X-API-Key", ctKeyA)
			ctStatus(t, revoked, http.StatusCreated)
			r := s.do(t, http.MethodDelete, keys+"/"+revoked.data(t)["id"].(string), nil, "X-API-Key", ctKeyA)
			require.Equal(t, http.StatusNoContent, r.status, "DELETE: %s", r.body)
			require.NoError(t, s.p.cmd.Process.Kill())
			<-s.p.exited
			s.start()
			got := s.do(t, http.MethodGet, settings, nil, "X-API-Key", kept.data(t)["key"].(string))
			ctStatus(t, got, http.StatusOK)
			assert.Equal(t, "Renamed", got.data(t)["name"])
			assert.Equal(t, "mygame://authorize", got.data(t)["game_authorize_url"])
			ctError(t, s.do(t, http.MethodGet, settings, nil, "X-API-Key", revoked.data(t)["key"].(string)), http.StatusUnauthorized, "unauthorized")
		}},
		{name: "ops/healthz and readyz", run: func(t *testing.T, s *ctService) {
			ctStatus(t, s.do(t, http.MethodGet, "/healthz", nil), http.StatusOK)
			ctStatus(t, s.do(t, http.MethodGet, "/readyz", nil), http.StatusOK)
		}},
		// §7: /metrics counts every request by method, route and status
		// (on the edge build, whichever instance served it), and the
		// scrape itself at the next scrape.
		{name: "ops/metrics count requests by method, route and status", run: func(t *testing.T, s *ctService) {
			for range 3 {
				s.mustRegister(t)
			}
			ctError(t, s.register(t, newCTCode(ctStoreA, "ak_wrong")), http.StatusUnauthorized, "unauthorized")
			first := s.metrics(t)
			m := s.metrics(t)
			assert.Equal(t, 3.0, ctMetric(t, m, ctRegisterSeries(http.StatusOK)), "registrations")
			assert.Equal(t, 1.0, ctMetric(t, m, ctRegisterSeries(http.StatusUnauthorized)), "a wrong key")
			assert.Equal(t, 4.0, ctMetric(t, m, `deeplink_http_request_duration_seconds_count{method="POST",route="/stores/{store_id}/auth/auth-code"}`), "latencies observed")
			assert.Equal(t, ctMetric(t, first, `deeplink_http_requests_total{method="GET",route="/metrics",status="200"}`)+1,
				ctMetric(t, m, `deeplink_http_requests_total{method="GET",route="/metrics",status="200"}`), "the first scrape, in the second")
			assert.Equal(t, 1, strings.Count(m, "# TYPE deeplink_http_requests_total counter"), "one family, whatever serves it")
		}},
		{name: "ops/unknown path 404 and wrong method 405", run: func(t *testing.T, s *ctService) {
			ctError(t, s.do(t, http.MethodGet, "/no/such/thing", nil), http.StatusNotFound, "not_found")
			r := s.do(t, http.MethodGet, "/stores/"+ctStoreA+"/auth/auth-code", nil)
			ctError(t, r, http.StatusMethodNotAllowed, "")
			assert.Contains(t, r.header.Get("Allow"), "POST")
		}},
		// §7: every response carries X-Request-Id, the request's own when
		// it is 1-128 visible ASCII characters, and the request's log
		// line the same id as request_id.
		{name: "ops/X-Request-Id on every response and in its log line", run: func(t *testing.T, s *ctService) {
			own := "req-" + ctRandom()[:12] + "!~"
			long := strings.Repeat("r", 129)
			type sent struct {
				what, id string
				r        ctResp
			}
			var all []sent
			for _, id := range []string{own, long, "two words", "", "none"} {
				var hdr []string
				if id != "none" {
					hdr = []string{"X-Request-Id", id}
				}
				c := newCTCode(ctStoreA, ctKeyA)
				for _, rq := range []struct {
					method, path string
					body         any
				}{
					{http.MethodPost, "/stores/" + ctStoreA + "/auth/auth-code", c.body()},
					{http.MethodPost, "/stores/" + ctStoreA + "/auth/auth-code", "{"},
					{http.MethodGet, "/stores/" + ctStoreA + "/auth/auth-code", nil},
					{http.MethodGet, "/no/such/thing", nil},
					{http.MethodGet, "/healthz", nil},
					{http.MethodGet, "/readyz", nil},
					{http.MethodGet, "/metrics", nil},
				} {
					r := s.do(t, rq.method, rq.path, rq.body, append([]string{"X-API-Key", ctKeyA}, hdr...)...)
					all = append(all, sent{fmt.Sprintf("%s %s with X-Request-Id %q", rq.method, rq.path, id), id, r})
				}
			}
			made := map[string]bool{}
			for _, x := range all {
				got := x.r.header.Get("X-Request-Id")
				if x.id == own {
					assert.Equal(t, own, got, "%s: the request's own id", x.what)
					continue
				}
				assert.True(t, validID(got), "%s: a new id of 1-128 visible ASCII characters, got %q", x.what, got)
				assert.NotEqual(t, x.id, got, "%s: a new id", x.what)
				assert.False(t, made[got], "%s: new id %q given twice", x.what, got)
				made[got] = true
			}
			s.stop() // the log is written out
			b, err := os.ReadFile(s.log)
			require.NoError(t, err)
			lines := map[string][]map[string]any{} // request lines by request_id
			for _, line := range bytes.Split(b, []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil && m["msg"] == "request" {
					id, _ := m["request_id"].(string)
					lines[id] = append(lines[id], m)
				}
			}
			for _, x := range all {
				id := x.r.header.Get("X-Request-Id")
				ls := lines[id]
				if x.id == own {
					require.Len(t, ls, len(all)/5, "the request lines with the client's own id")
					continue
				}
				if assert.Len(t, ls, 1, "%s: the request lines with request_id %q", x.what, id) {
					assert.Equal(t, float64(x.r.status), ls[0]["status"], "%s: the logged status", x.what)
				}
			}
		}},

		// §5 webhooks.
		{name: "webhooks/create, list, get, secret, patch, delete", run: func(t *testing.T, s *ctService) {
			id, secret := s.createEndpoint(t, "https://merchant.example.com/hooks")
			key := []string{"X-API-Key", ctKeyA}

			list := s.do(t, http.MethodGet, ctHooks(""), nil, key...)
			ctStatus(t, list, http.StatusOK)
			assert.NotContains(t, string(list.body), secret)
			assert.NotContains(t, string(list.body), `"secret"`)
			assert.Contains(t, string(list.body), id)

			one := s.do(t, http.MethodGet, ctHooks("/"+id), nil, key...)
			ctStatus(t, one, http.StatusOK)
			assert.NotContains(t, string(one.body), secret)
			ep := one.data(t)
			assert.Equal(t, id, ep["id"])
			assert.Equal(t, "https://merchant.example.com/hooks", ep["url"])
			assert.Equal(t, true, ep["enabled"])
			for _, k := range []string{"description", "events", "created_at", "updated_at"} {
				assert.Contains(t, ep, k)
			}

			sec := s.do(t, http.MethodGet, ctHooks("/"+id+"/secret"), nil, key...)
			ctStatus(t, sec, http.StatusOK)
			assert.Equal(t, secret, sec.data(t)["secret"])

			patched := s.do(t, http.MethodPatch, ctHooks("/"+id), map[string]any{"description": "changed", "enabled": false}, key...)
			ctStatus(t, patched, http.StatusOK)
			assert.Equal(t, "changed", patched.data(t)["description"])
			assert.Equal(t, false, patched.data(t)["enabled"])
			assert.Equal(t, "changed", s.do(t, http.MethodGet, ctHooks("/"+id), nil, key...).data(t)["description"])

			ctStatus(t, s.do(t, http.MethodDelete, ctHooks("/"+id), nil, key...), http.StatusNoContent)
			ctError(t, s.do(t, http.MethodGet, ctHooks("/"+id), nil, key...), http.StatusNotFound, "not_found")
			ctError(t, s.do(t, http.MethodGet, ctHooks(""), nil), http.StatusUnauthorized, "unauthorized")
		}},
		{name: "webhooks/6th endpoint 422", run: func(t *testing.T, s *ctService) {
			for i := range 5 {
				s.createEndpoint(t, fmt.Sprintf("https://merchant.example.com/hooks/%d", i))
			}
			r := s.do(t, http.MethodPost, ctHooks(""), map[string]any{
				"url": "https://merchant.example.com/hooks/5", "events": []string{"order.status.updated"},
			}, "X-API-Key", ctKeyA)
			ctError(t, r, http.StatusUnprocessableEntity, "validation_failed")
		}},
		{name: "webhooks/publish 202, 422 and the idempotency key", run: func(t *testing.T, s *ctService) {
			rc := newCTReceiver(t, ctAlways(http.StatusOK))
			ep, _ := s.createEndpoint(t, rc.URL)
			first := s.publish(t, "order-1", "Idempotency-Key", "k-1")
			assert.Equal(t, first, s.publish(t, "order-1", "Idempotency-Key", "k-1"), "a repeat returns the first id")
			assert.Len(t, s.deliveries(t, ep), 1, "and sends nothing new")
			assert.NotEqual(t, first, s.publish(t, "order-1", "Idempotency-Key", "k-2"))

			bad := s.do(t, http.MethodPost, "/stores/"+ctStoreA+"/events", map[string]any{
				"type": "order.status.updated", "data": map[string]any{"object": map[string]any{"id": "o", "status": "lost"}},
			}, "X-API-Key", ctKeyA)
			ctError(t, bad, http.StatusUnprocessableEntity, "validation_failed")
		}},
		{name: "webhooks/a delivery arrives signed and is logged succeeded", run: func(t *testing.T, s *ctService) {
			rc := newCTReceiver(t, ctAlways(http.StatusOK))
			ep, secret := s.createEndpoint(t, rc.URL)
			evt := s.publish(t, "order-7")
			ctEventually(t, 20*time.Second, func() bool { return len(rc.got()) >= 1 }, "the delivery arrives")
			h := rc.got()[0]
			mt, _, _ := mime.ParseMediaType(h.header.Get("Content-Type"))
			assert.Equal(t, "application/json", mt)
			assert.Contains(t, h.header.Get("User-Agent"), "/")
			if s.target == targetWasm {
				assert.Equal(t, "deeplink-webhooks/"+ctHostVersion, h.header.Get("User-Agent"), "the host's sender sends")
			}
			ctVerifySignature(t, h, secret)
			var body struct {
				ID        string `json:"id"`
				Type      string `json:"type"`
				CreatedAt int64  `json:"created_at"`
				Data      struct {
					Object map[string]any `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(h.body, &body), "body %s", h.body)
			assert.Equal(t, evt, body.ID)
			assert.Equal(t, "order.status.updated", body.Type)
			assert.InDelta(t, time.Now().Unix(), body.CreatedAt, 60)
			assert.Equal(t, map[string]any{"id": "order-7", "status": "completed"}, body.Data.Object)

			ctEventually(t, 10*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "succeeded"
			}, "the delivery log shows succeeded")
			d := s.deliveries(t, ep)[0]
			one := s.do(t, http.MethodGet, ctHooks("/"+ep+"/deliveries/"+d["id"].(string)), nil, "X-API-Key", ctKeyA)
			ctStatus(t, one, http.StatusOK)
			attempts, _ := one.data(t)["attempts"].([]any)
			require.Len(t, attempts, 1)
			logged, _ := attempts[0].(map[string]any)["request_headers"].(map[string]any)
			assert.Equal(t, h.header.Get("User-Agent"), logged["User-Agent"], "the log shows the User-Agent sent")
		}},
		// API.md §5: one slow or dead endpoint never delays another, nor
		// do nine: every endpoint the two stores may have but one holds
		// its attempts (4 each, 36 in all) while the last gets its own.
		{name: "webhooks/slow endpoints never delay another", run: func(t *testing.T, s *ctService) {
			slow := newCTHoldingReceiver(t)
			fast := ctNewReceiverOK(t)
			create := func(store, key, u string) {
				ctStatus(t, s.do(t, http.MethodPost, "/stores/"+store+"/webhooks",
					map[string]any{"url": u, "events": []string{"order.status.updated"}}, "X-API-Key", key), http.StatusCreated)
			}
			publish := func(store, key, order string) {
				ctStatus(t, s.do(t, http.MethodPost, "/stores/"+store+"/events", map[string]any{
					"type": "order.status.updated",
					"data": map[string]any{"object": map[string]any{"id": order, "status": "pending"}},
				}, "X-API-Key", key), http.StatusAccepted)
			}
			for range 5 {
				create(ctStoreA, ctKeyA, slow.URL)
			}
			for range 4 {
				create(ctStoreB, ctKeyB, slow.URL)
			}
			for i := range 4 {
				publish(ctStoreA, ctKeyA, fmt.Sprint("a", i))
				publish(ctStoreB, ctKeyB, fmt.Sprint("b", i))
			}
			ctEventually(t, 4*time.Second, func() bool { return slow.held.Load() >= 36 }, "36 attempts under way at once")
			create(ctStoreB, ctKeyB, fast.URL)
			publish(ctStoreB, ctKeyB, "last")
			ctEventually(t, 2*time.Second, func() bool { return len(fast.got()) > 0 }, "the last endpoint waited for the slow ones")
		}},
		// A deleted endpoint's attempts under way are given up at once,
		// not held to the timeout (5 s here), counted against nothing.
		// docs/api.md: disabling an endpoint fails its queued deliveries
		// at once: by the answer, on either build.
		{name: "webhooks/disabling an endpoint fails its queue by the answer", opts: ctOpts{retry: []string{"10s", "10s"}}, run: func(t *testing.T, s *ctService) {
			rc := newCTReceiver(t, ctAlways(http.StatusInternalServerError))
			ep, _ := s.createEndpoint(t, rc.URL)
			for i := range 3 {
				s.publish(t, fmt.Sprintf("queued-%d", i))
			}
			ctEventually(t, 10*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 3 && d[0]["attempt_count"] == float64(1) && d[1]["attempt_count"] == float64(1) && d[2]["attempt_count"] == float64(1)
			}, "each delivery failed once, its retry 10 s away")
			ctStatus(t, s.do(t, http.MethodPatch, ctHooks("/"+ep), map[string]any{"enabled": false}, "X-API-Key", ctKeyA), http.StatusOK)
			for _, d := range s.deliveries(t, ep) {
				assert.Equal(t, "failed", d["status"], "delivery %v right after the endpoint was disabled", d["id"])
			}
		}},
		{name: "webhooks/deleting an endpoint gives up its attempts", run: func(t *testing.T, s *ctService) {
			slow := newCTHoldingReceiver(t)
			ep, _ := s.createEndpoint(t, slow.URL)
			s.publish(t, "held")
			ctEventually(t, 4*time.Second, func() bool { return slow.held.Load() == 1 }, "the attempt under way")
			ctStatus(t, s.do(t, http.MethodDelete, ctHooks("/"+ep), nil, "X-API-Key", ctKeyA), http.StatusNoContent)
			ctEventually(t, 3*time.Second, func() bool { return slow.dropped.Load() == 1 }, "the attempt given up before the timeout")
		}},
		{name: "webhooks/rotate-secret signs with both, test sends webhook.test", run: func(t *testing.T, s *ctService) {
			rc := ctNewReceiverOK(t)
			ep, old := s.createEndpoint(t, rc.URL)
			r := s.do(t, http.MethodPost, ctHooks("/"+ep+"/rotate-secret"), nil, "X-API-Key", ctKeyA)
			ctStatus(t, r, http.StatusOK)
			answered, _ := r.data(t)["secret"].(string)
			r = s.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, "X-API-Key", ctKeyA)
			ctStatus(t, r, http.StatusOK)
			fresh, _ := r.data(t)["secret"].(string)
			require.True(t, strings.HasPrefix(fresh, "whsec_"), "secret %q", fresh)
			require.NotEqual(t, old, fresh)
			assert.Equal(t, fresh, answered, "rotate-secret answers the new secret")

			ctStatus(t, s.do(t, http.MethodPost, ctHooks("/"+ep+"/test"), nil, "X-API-Key", ctKeyA), http.StatusAccepted)
			ctEventually(t, 20*time.Second, func() bool { return len(rc.got()) >= 1 }, "the test event arrives")
			h := rc.got()[0]
			assert.Contains(t, string(h.body), `"webhook.test"`)
			ctVerifySignature(t, h, fresh)
			ctVerifySignature(t, h, old) // within secret_rotation_grace
		}},
		{name: "webhooks/a failing receiver is retried, then failed", opts: ctOpts{retry: []string{"50ms", "50ms"}}, run: func(t *testing.T, s *ctService) {
			rc := newCTReceiver(t, ctAlways(http.StatusInternalServerError))
			ep, _ := s.createEndpoint(t, rc.URL)
			s.publish(t, "order-9")
			ctEventually(t, 20*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "failed"
			}, "the delivery ends failed")
			assert.Len(t, rc.got(), 3, "the first attempt and one per retry_schedule entry")
			assert.EqualValues(t, 3, s.deliveries(t, ep)[0]["attempt_count"])
		}},

		// §2 trusted_ca_file: the roots the webhook client trusts.
		{name: "webhooks/trusted_ca_file adds a root the receiver's certificate needs", run: func(t *testing.T, s *ctService) {
			var hits atomic.Int32
			rc := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
			t.Cleanup(rc.Close)
			s.stop()
			ca := filepath.Join(t.TempDir(), "receiver-ca.pem")
			require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.Certificate().Raw}), 0o600))
			s.editConfig(t, func(c map[string]any) { c["webhooks"].(map[string]any)["trusted_ca_file"] = ca })
			s.start()
			ep, _ := s.createEndpoint(t, rc.URL)
			s.publish(t, "order-ca")
			ctEventually(t, 20*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "succeeded"
			}, "delivered over TLS to a certificate only trusted_ca_file vouches for")
			assert.EqualValues(t, 1, hits.Load())
		}},

		// §1 a configuration error.
		{name: "config/a bad field exits non-zero naming it, before listening", run: func(t *testing.T, s *ctService) {
			s.stop()
			bad := filepath.Join(t.TempDir(), "bad.json")
			require.NoError(t, os.WriteFile(bad, []byte(`{"auth_code_ttl": "soon", "stores": [{"id": "`+ctStoreA+
				`", "name": "A", "api_keys": ["`+ctKeyA+`"], "redirect_domains": ["shop.example.com"]}]}`), 0o600))
			// The service's address, taken: a service that listened first
			// would fail on that instead (the edge host did, waiting for
			// its module to read the file).
			ln, err := net.Listen("tcp", strings.TrimPrefix(s.URL, "http://"))
			require.NoError(t, err)
			defer ln.Close()
			ctConfigError(t, s, "-config", bad, "auth_code_ttl")
		}},

		// §6 nothing acknowledged is lost: not when the reader of the log
		// goes away, which would kill a Go program with SIGPIPE on its
		// next write to standard error, one request in about 260.
		{name: "ops/a log reader that goes away costs the log, not the state", run: func(t *testing.T, s *ctService) {
			s.stop()
			r, w, err := os.Pipe()
			require.NoError(t, err)
			require.NoError(t, r.Close()) // the reader is gone before the first line
			p, err := ctLaunchTo(s.argv, w, s.log)
			require.NoError(t, err)
			s.p = p
			require.NoError(t, p.waitReady(s.URL, time.Minute))
			var codes []ctCode
			for range 600 { // more lines than the 64 KiB log buffer holds
				codes = append(codes, s.mustRegister(t))
			}
			s.stop() // exit code 0
			s.start()
			for _, c := range []ctCode{codes[0], codes[599]} {
				ctError(t, s.register(t, c), http.StatusConflict, "auth_code_conflict")
			}
		}},
		// SIGHUP, whose default kills the process with its state
		// unwritten (a logrotate postrotate, a closed terminal), is
		// ignored and logged: there is nothing to reload.
		{name: "a SIGHUP is logged and ignored", run: func(t *testing.T, s *ctService) {
			code := s.mustRegister(t)
			require.NoError(t, s.p.cmd.Process.Signal(syscall.SIGHUP))
			ctEventually(t, 20*time.Second, func() bool {
				b, _ := os.ReadFile(s.log)
				return bytes.Contains(b, []byte("SIGHUP ignored"))
			}, "no line about the SIGHUP")
			select {
			case <-s.p.exited:
				t.Fatalf("exited on SIGHUP: %v", s.p.err)
			default:
			}
			ctToken(t, s.redeem(t, ctStoreA, code))
		}},
		// Every state acknowledged survives a graceful restart: when the
		// state cannot be written at a SIGTERM (data_dir read-only, a full
		// disk; here the snapshot the stop writes of a large journal is
		// blocked by a directory of its name), the service keeps trying,
		// says so, and exits 0 once the write works; a second signal gives
		// up, exit 1. The edge host exits 1 at once (docs/api.md). its module
		// wrote each change before answering.
		{name: "native/a shutdown whose write fails retries until it works, or a second signal", targets: nativeOnly, opts: ctOpts{embeddedOnly: true}, run: func(t *testing.T, s *ctService) {
			dir := s.argv[slices.Index(s.argv, "-data")+1]
			retrying := func() bool {
				b, _ := os.ReadFile(s.log)
				return bytes.Contains(b, []byte("cannot write the state; trying again"))
			}
			for _, giveUp := range []bool{false, true} {
				ep, _ := s.createEndpoint(t, "https://merchant.example.com/hooks")
				code := s.mustRegister(t)
				s.stop()
				ctPrefillJournal(t, dir, 30_000) // a journal the stop folds into a snapshot
				s.start()
				_, gen := newestStateFile(t, dir, "journal")
				blocker := filepath.Join(dir, fmt.Sprintf("snapshot-%016x", gen+1))
				require.NoError(t, os.Mkdir(blocker, 0o700)) // the snapshot's rename over it fails
				require.NoError(t, os.Truncate(s.log, 0))
				require.NoError(t, s.p.cmd.Process.Signal(syscall.SIGTERM))
				ctEventually(t, 20*time.Second, retrying, "no retry logged after SIGTERM")
				select {
				case <-s.p.exited:
					t.Fatalf("exited while its state was not written: %v", s.p.err)
				default:
				}
				if giveUp {
					require.NoError(t, s.p.cmd.Process.Signal(syscall.SIGTERM))
				} else {
					require.NoError(t, os.Remove(blocker)) // the disk works again
				}
				select {
				case <-s.p.exited:
				case <-time.After(20 * time.Second):
					t.Fatal("still running")
				}
				if giveUp {
					var exit *exec.ExitError
					require.ErrorAs(t, s.p.err, &exit, "exit after a second SIGTERM")
					assert.Equal(t, 1, exit.ExitCode())
					return
				}
				require.NoError(t, s.p.err, "exit once the write worked (want code 0)")
				s.start()
				ctStatus(t, s.do(t, http.MethodGet, ctHooks("/"+ep), nil, "X-API-Key", ctKeyA), http.StatusOK)
				ctError(t, s.register(t, code), http.StatusConflict, "auth_code_conflict")
			}
		}},
		// §1 and §7: a SIGTERM stops the service taking work, but while a
		// request from before is under way /readyz answers 503 rather than
		// nothing; that request is answered, what it acknowledged survives,
		// and the process exits 0.
		{name: "ops/shutting down: 503 while a request is under way, then exit 0", run: func(t *testing.T, s *ctService) {
			host := strings.TrimPrefix(s.URL, "http://")
			c, err := net.Dial("tcp", host)
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(time.Minute)))
			code := newCTCode(ctStoreA, ctKeyA)
			body, err := json.Marshal(code.body())
			require.NoError(t, err)
			// The body waits for 100 Continue, which comes once the service
			// reads it: the request is then under way.
			_, err = fmt.Fprintf(c, "POST /stores/%s/auth/auth-code HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n"+
				"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", ctStoreA, host, ctKeyA, len(body))
			require.NoError(t, err)
			br := bufio.NewReader(c)
			for _, want := range []string{"HTTP/1.1 100 Continue\r\n", "\r\n"} {
				line, err := br.ReadString('\n')
				require.NoError(t, err)
				require.Equal(t, want, line)
			}

			require.NoError(t, s.p.cmd.Process.Signal(syscall.SIGTERM))
			// A connection each: the service closes idle ones as it stops.
			probe := *s.client
			probe.Transport = &http.Transport{DisableKeepAlives: true}
			s.client = &probe
			ctEventually(t, 20*time.Second, func() bool {
				return s.do(t, http.MethodGet, "/readyz", nil).status == http.StatusServiceUnavailable
			}, "/readyz never answered 503 after SIGTERM")
			for _, r := range []ctResp{
				s.do(t, http.MethodGet, "/readyz", nil),
				s.register(t, newCTCode(ctStoreA, ctKeyA)),
			} {
				ctError(t, r, http.StatusServiceUnavailable, "unavailable")
				assert.NotEmpty(t, r.header.Get("Retry-After"), "Retry-After of %s", r.resp.Request.URL.Path)
			}
			ctStatus(t, s.do(t, http.MethodGet, "/healthz", nil), http.StatusOK)
			select {
			case <-s.p.exited:
				t.Fatalf("exited with a request under way: %v", s.p.err)
			default:
			}

			_, err = c.Write(body)
			require.NoError(t, err)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "the request under way was not answered")
			answered, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable}, resp.StatusCode, "the request under way: %s", answered)
			select {
			case <-s.p.exited:
				require.NoError(t, s.p.err, "exit after SIGTERM (want code 0)")
			case <-time.After(30 * time.Second):
				t.Fatal("still running 30 s after SIGTERM and its last request")
			}
			// What the answer said holds after the restart.
			s.start()
			if resp.StatusCode == http.StatusOK {
				ctError(t, s.register(t, code), http.StatusConflict, "auth_code_conflict")
			} else {
				ctStatus(t, s.register(t, code), http.StatusOK)
			}
		}},
		// §1 the command line: a misspelt subcommand, or one after a flag,
		// is not taken for a reason to start the demo.
		{name: "cli/a stray argument exits 2 without serving", run: func(t *testing.T, s *ctService) {
			s.stop()
			for _, extra := range [][]string{{"verfy", "-secret", "x"}, {"verify"}} {
				args := append(slices.Clone(s.argv[1:]), extra...)
				// A service that started instead is stopped by the timeout.
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, s.argv[0], args...).CombinedOutput()
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%v: output %s", args, out)
				assert.Equal(t, 2, exit.ExitCode(), "%v", args)
				assert.Contains(t, string(out), "unexpected argument", "%v", args)
			}
		}},
		{name: "native/cli: help and version exit 0 on stdout, named deeplink", targets: nativeOnly, run: func(t *testing.T, s *ctService) {
			for _, tt := range []struct {
				args []string
				want string // the start of stdout
			}{
				{[]string{"-h"}, "deeplink signs players"},
				{[]string{"help"}, "deeplink signs players"},
				{[]string{"verify", "-h"}, "usage: deeplink verify -secret"},
				{[]string{"version"}, "deeplink "},
			} {
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(s.argv[0], tt.args...)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil || !strings.HasPrefix(stdout.String(), tt.want) || stderr.Len() != 0 {
					t.Errorf("deeplink %q = %v, stdout %q, stderr %q; want exit 0, stdout starting %q", tt.args, err, stdout.String(), stderr.String(), tt.want)
				}
				if strings.Contains(stdout.String(), s.argv[0]) {
					t.Errorf("deeplink %q: stdout %q names the binary's path", tt.args, stdout.String())
				}
			}
		}},
		{name: "config/an unusable data_dir exits non-zero naming it, before listening", opts: ctOpts{embeddedOnly: true}, run: func(t *testing.T, s *ctService) {
			s.stop()
			file := filepath.Join(t.TempDir(), "not-a-dir")
			require.NoError(t, os.WriteFile(file, nil, 0o600))
			// The service's address, taken: a service that listened first
			// would fail on that instead.
			ln, err := net.Listen("tcp", strings.TrimPrefix(s.URL, "http://"))
			require.NoError(t, err)
			defer ln.Close()
			ctConfigError(t, s, "-data", file, "data_dir")
		}},

		// §6 restart.
		{name: "restart/a code and an endpoint survive; the code redeems once", run: func(t *testing.T, s *ctService) {
			c := s.mustRegister(t)
			ep, secret := s.createEndpoint(t, "https://merchant.example.com/hooks")
			s.restart()
			ctStatus(t, s.do(t, http.MethodGet, ctHooks("/"+ep), nil, "X-API-Key", ctKeyA), http.StatusOK)
			assert.Equal(t, secret, s.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, "X-API-Key", ctKeyA).data(t)["secret"])
			ctToken(t, s.redeem(t, ctStoreA, c))
			ctTokenError(t, s.redeem(t, ctStoreA, c), "invalid_grant")
		}},
		// The retry comes 5 s after the first attempt: past the stop, which
		// lingers a second or two on idle connections (docs/operations.md).
		{name: "restart/a pending delivery survives and then arrives", opts: ctOpts{retry: []string{"5s"}}, run: func(t *testing.T, s *ctService) {
			rc := newCTReceiver(t, func(n int) int {
				if n == 1 {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			})
			ep, _ := s.createEndpoint(t, rc.URL)
			s.publish(t, "order-11")
			ctEventually(t, 20*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "pending" && d[0]["attempt_count"] == float64(1)
			}, "the first attempt failed and the delivery is pending")
			s.stop()
			require.Len(t, rc.got(), 1, "the retry was not made before the stop")
			s.start()
			ctEventually(t, 20*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "succeeded"
			}, "the retry after the restart succeeds")
			got := rc.got()
			require.Len(t, got, 2)
			assert.Equal(t, got[0].body, got[1].body, "the same event")
		}},

		// API.md §7: /readyz is 503 while starting. The host takes the
		// longest to start on a cold compilation cache: it answers then.
		// And SIGTERM then ends it as API.md §1 says: exit 0, state
		// written, without ever becoming ready.
		{name: "starting/the host answers while the module compiles", targets: wasmOnly, run: func(t *testing.T, s *ctService) {
			c := s.mustRegister(t)
			s.stop()
			argv := slices.Clone(s.argv)
			i := slices.Index(argv, "-cache")
			require.GreaterOrEqual(t, i, 0, "argv %q", argv)
			argv[i+1] = t.TempDir() // cold: the module compiles for seconds
			log := filepath.Join(t.TempDir(), "cold.log")
			p, err := ctLaunch(argv, log)
			require.NoError(t, err)
			s.p = p // the cleanup stops it
			ctEventually(t, time.Minute, func() bool {
				r, err := s.client.Get(s.URL + "/healthz")
				if err != nil {
					return false
				}
				r.Body.Close()
				return r.StatusCode == http.StatusOK
			}, "/healthz answered 200")
			r := s.do(t, http.MethodGet, "/readyz", nil, "X-Request-Id", "while-compiling")
			ctError(t, r, http.StatusServiceUnavailable, "unavailable")
			assert.NotEmpty(t, r.header.Get("Retry-After"), "Retry-After")
			assert.Equal(t, "while-compiling", r.header.Get("X-Request-Id"), "the request's own id, from the host")
			// API.md §3: the token endpoint answers in OAuth's form.
			r = s.redeem(t, ctStoreA, c)
			assert.Equal(t, http.StatusServiceUnavailable, r.status)
			assert.JSONEq(t, `{"error":"temporarily_unavailable","error_description":"the service is starting (compiling its module); retry shortly"}`, string(r.body))

			require.NoError(t, p.terminate(3*time.Minute))
			b, err := os.ReadFile(log)
			require.NoError(t, err)
			assert.NotContains(t, string(b), "edge module ready", "stopped while starting, it became ready")
			s.start() // the cache is warm now
			ctToken(t, s.redeem(t, ctStoreA, c))
		}},

		// The module makes no request of its own (the host fetches for
		// it, deeplink_host.fetch): it must not link net/http's client,
		// TLS connections or sockets, which were a fifth of its size and
		// of the work of every launch.
		{name: "edge/the module links no network client, TLS or sockets", targets: wasmOnly, run: func(t *testing.T, _ *ctService) {
			require.True(t, wasmBuild.linked["main.wasmHandle"], "the linker's list names the module's handle export (%d symbols)", len(wasmBuild.linked))
			for _, sym := range []string{
				"net/http.(*Transport).RoundTrip",
				"crypto/tls.(*Conn).Handshake",
				"net.(*Dialer).DialContext",
			} {
				assert.False(t, wasmBuild.linked[sym], "the module links %s", sym)
			}
		}},

		// The edge module's faults (wasm only; the routes exist only in a
		// module built with -tags edgefault).
		{name: "fault/a handler panic answers 500 and keeps state", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			// API.md §7: no codes in the logs, the panic's line included.
			const code = "a-code-never-to-be-logged"
			ctFault(t, s, "/__fault/panic?code="+code)
			s.stop() // the log is written out
			log, err := os.ReadFile(s.log)
			require.NoError(t, err)
			assert.Contains(t, string(log), "handler panicked")
			assert.NotContains(t, string(log), code, "the service's log")
		}},
		{name: "fault/a crashed instance is restored from data_dir", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			ctFault(t, s, "/__fault/crash")
		}},
		{name: "fault/a trapped instance is restored from data_dir", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			ctFault(t, s, "/__fault/trap")
		}},
		// The host sends the deliveries: an attempt under way goes on
		// when the instance that made the delivery is replaced.
		{name: "fault/a replaced instance leaves the attempts under way to the host", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			release := make(chan struct{})
			var got, dropped atomic.Int32
			rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				got.Add(1)
				select {
				case <-release:
				case <-r.Context().Done():
					dropped.Add(1)
				}
			}))
			t.Cleanup(rc.Close)
			ep, _ := s.createEndpoint(t, rc.URL)
			s.publish(t, "held")
			ctEventually(t, 4*time.Second, func() bool { return got.Load() >= 1 }, "the attempt under way")
			ctError(t, s.do(t, http.MethodGet, "/__fault/crash", nil), http.StatusInternalServerError, "internal")
			d := s.deliveries(t, ep) // served by the fresh instance
			require.Len(t, d, 1)
			assert.Equal(t, "pending", d[0]["status"], "under way still")
			close(release)
			ctEventually(t, 10*time.Second, func() bool {
				d := s.deliveries(t, ep)
				return len(d) == 1 && d[0]["status"] == "succeeded"
			}, "the attempt under way recorded")
			assert.EqualValues(t, 1, got.Load(), "sent once")
			assert.EqualValues(t, 0, dropped.Load(), "not cut off")
		}},
		{name: "fault/a runaway call is cut off at the call deadline", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			start := time.Now()
			ctFault(t, s, "/__fault/spin")
			assert.Less(t, time.Since(start), ctCallTimeout+10*time.Second, "bounded by -call-timeout %v", ctCallTimeout)
		}},
		// A call that never calls the host cannot be cut off, and stops
		// the whole host at its next garbage collection: the watchdog
		// kills the host a moment past the deadline, for its supervisor
		// to restart it, and the restart has everything acknowledged.
		{name: "fault/a runaway call that never calls the host ends the host; a restart serves on", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			c := s.mustRegister(t)
			used := s.mustRegister(t)
			ctToken(t, s.redeem(t, ctStoreA, used))
			start := time.Now()
			r, err := s.send(http.MethodGet, "/__fault/spin-bare", nil)
			require.Error(t, err, "GET /__fault/spin-bare answered %d: want the connection cut", r.status)
			select {
			case <-s.p.exited:
			case <-time.After(30 * time.Second):
				t.Fatal("the host still runs 30 s after the runaway call")
			}
			assert.Less(t, time.Since(start), ctCallTimeout+10*time.Second, "bounded by -call-timeout %v", ctCallTimeout)
			log, err := os.ReadFile(s.log)
			require.NoError(t, err)
			assert.Contains(t, string(log), "edge watchdog: a call ran past its deadline without calling the host")
			s.start()
			ctToken(t, s.redeem(t, ctStoreA, c))
			ctTokenError(t, s.redeem(t, ctStoreA, used), "invalid_grant")
			ctToken(t, s.redeem(t, ctStoreA, s.mustRegister(t)))
		}},
		// Start restores the whole store, which for a large one takes
		// longer than any call may: it runs without the call deadline, at
		// launch and when a failed instance is replaced.
		{name: "fault/a large store starts and recovers past the call deadline", targets: wasmOnly, opts: ctOpts{faults: true, callTimeout: 300 * time.Millisecond}, run: func(t *testing.T, s *ctService) {
			s.stop()
			c := ctPrefill(t, s.argv[slices.Index(s.argv, "-data")+1], 60_000)
			start := time.Now()
			s.start()
			t.Logf("started with 60 000 codes in %v (-call-timeout 300ms)", time.Since(start))
			ctFault(t, s, "/__fault/trap") // the replacement restores them all again
			ctToken(t, s.redeem(t, ctStoreA, c))
		}},
		// API.md §3 503 "unable to persist": a change the store cannot
		// write answers 503, and what was not acknowledged is not kept
		// while what was is.
		{name: "fault/a change that cannot be written answers 503 and is not kept", targets: wasmOnly, opts: ctOpts{faults: true}, run: func(t *testing.T, s *ctService) {
			acked := s.mustRegister(t)
			ctStatus(t, s.do(t, http.MethodPost, "/__fault/persist", nil), http.StatusNoContent)

			lost := newCTCode(ctStoreA, ctKeyA)
			r := s.register(t, lost)
			ctError(t, r, http.StatusServiceUnavailable, "unavailable")
			retry, err := strconv.Atoi(r.header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q is in seconds", r.header.Get("Retry-After"))
			assert.Positive(t, retry)

			ctStatus(t, s.do(t, http.MethodGet, "/healthz", nil), http.StatusOK)
			ctToken(t, s.redeem(t, ctStoreA, acked))
			// Not acknowledged, so not kept: the client's retry registers
			// it afresh (a kept code would be 409 auth_code_conflict), and
			// it redeems.
			ctStatus(t, s.register(t, lost), http.StatusOK)
			ctToken(t, s.redeem(t, ctStoreA, lost))
		}},
	}
}

// ctConfigError runs the service's binary with flag set to value and
// checks what API.md §1 asks of a configuration error: a non-zero exit,
// and a last line naming field.
func ctConfigError(t *testing.T, s *ctService, flag, value, field string) {
	t.Helper()
	argv := slices.Clone(s.argv)
	argv[slices.Index(argv, flag)+1] = value
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "output %s", out)
	assert.NotZero(t, exit.ExitCode())
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.Contains(t, lines[len(lines)-1], field, "output %s", out)
}

// editConfig rewrites the service's configuration file through edit; the
// service reads it when it next starts.
func (s *ctService) editConfig(t *testing.T, edit func(map[string]any)) {
	t.Helper()
	path := s.argv[slices.Index(s.argv, "-config")+1]
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	edit(c)
	b, err = json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// ctPrefillJournal adds n live codes of store A to the state in dir as a
// journal, not folded into a snapshot, as a crash would leave it.
func ctPrefillJournal(t *testing.T, dir string, n int) {
	t.Helper()
	st, err := embedded.Open(dir, embedded.Options{Durability: embedded.Interval, FoldAt: 1 << 40})
	require.NoError(t, err)
	exp := time.Now().Add(time.Hour)
	rec := codeRecord{RedirectURI: ctShopCB, CodeChallenge: ctChallenge(newCTCode(ctStoreA, ctKeyA).verifier), Player: Player{ClientReferenceID: "player-42"}}
	for range n {
		require.NoError(t, st.Insert(t.Context(), codeKey(ctStoreA, newCTCode(ctStoreA, ctKeyA).code).name(), rec.appendTo(nil), exp))
	}
	require.NoError(t, st.Sync()) // and never closed: no snapshot
}

// ctPrefill adds n live codes of store A to the state in dir, as the
// service would have registered them, and returns one of them.
func ctPrefill(t *testing.T, dir string, n int) ctCode {
	t.Helper()
	st, err := embedded.Open(dir, embedded.Options{Durability: embedded.Interval})
	require.NoError(t, err)
	var c ctCode
	exp := time.Now().Add(time.Hour)
	for range n {
		c = newCTCode(ctStoreA, ctKeyA)
		rec := codeRecord{RedirectURI: ctShopCB, CodeChallenge: ctChallenge(c.verifier), Player: Player{
			ClientReferenceID: "player-42", FirstName: "Ada", LastName: "Lovelace",
			Language: "pt-BR", Currency: "EUR", Country: "PT", Timezone: "Europe/Lisbon",
		}}
		require.NoError(t, st.Insert(t.Context(), codeKey(ctStoreA, c.code).name(), rec.appendTo(nil), exp))
	}
	require.NoError(t, st.Close()) // written whole, as a snapshot
	return c
}

// ctFault registers a code, creates an endpoint and redeems another code,
// makes the module fail on a request, and checks that the request got a
// 500 JSON error, that the service still answers, and that what was
// acknowledged before the fault is still there: the live code redeems, the
// endpoint exists, the redeemed code stays consumed.
func ctFault(t *testing.T, s *ctService, path string) {
	t.Helper()
	c := s.mustRegister(t)
	ep, _ := s.createEndpoint(t, "https://merchant.example.com/hooks")
	used := s.mustRegister(t)
	ctToken(t, s.redeem(t, ctStoreA, used))

	ctError(t, s.do(t, http.MethodGet, path, nil), http.StatusInternalServerError, "internal")

	ctStatus(t, s.do(t, http.MethodGet, "/healthz", nil), http.StatusOK)
	ctStatus(t, s.do(t, http.MethodGet, ctHooks("/"+ep), nil, "X-API-Key", ctKeyA), http.StatusOK)
	ctToken(t, s.redeem(t, ctStoreA, c))
	// A redemption is acknowledged state too: the code stays consumed.
	ctTokenError(t, s.redeem(t, ctStoreA, used), "invalid_grant")
	// And the recovered instance takes new work.
	ctToken(t, s.redeem(t, ctStoreA, s.mustRegister(t)))
	// The instance replaced took no counts with it: the host counts.
	m := s.metrics(t)
	assert.Equal(t, 3.0, ctMetric(t, m, ctRegisterSeries(http.StatusOK)), "registrations, those before the fault included")
	assert.Equal(t, 1.0, ctMetric(t, m, `deeplink_http_requests_total{method="GET",route="host",status="500"}`), "the host's own answer to the fault")
}
