//go:build !wasip1 && !nobrowser

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The game side's examples (examples/game/: Go, TypeScript for Node,
// Python), each run as its own process against the real service and driven
// in headless Chromium: the webshop's link → the example's handler → the
// callback → signed in; and a 422, a 400 and a 503 from the service, and a
// link for another store, shown in the example's page, with no redirect.

// gameExample is one language's example: how to build and run it.
type gameExample struct {
	name string
	// argv builds the example where it needs building and returns the
	// command that serves it (on $PORT, configured by gameEnv).
	argv func(t *testing.T) []string
}

var gameExamples = []gameExample{
	{"go", func(t *testing.T) []string {
		bin := filepath.Join(t.TempDir(), "game")
		require.NoError(t, ctGoBuild(nil, "-o", bin, "./examples/game/go"))
		return []string{bin}
	}},
	{"node", func(t *testing.T) []string {
		node := needTool(t, "node")
		dir := filepath.Join("examples", "game", "node")
		tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
		if _, err := os.Stat(tsc); err != nil {
			if os.Getenv(requireToolsEnv) == "require" {
				t.Fatalf("%s is missing, and %s=require: ./test.sh runs npm ci in %s", tsc, requireToolsEnv, dir)
			}
			t.Skipf("skipped: %s is missing (npm ci in %s installs it, as ./test.sh does)", tsc, dir)
		}
		out := t.TempDir()
		b, err := exec.Command(tsc, "-p", dir, "--outDir", out).CombinedOutput()
		require.NoError(t, err, "tsc: %s", b)
		return []string{node, filepath.Join(out, "authorize.js")}
	}},
	{"python", func(t *testing.T) []string {
		return []string{needTool(t, "python3"), filepath.Join("examples", "game", "python", "authorize.py")}
	}},
}

// gameFront stands between an example and the service: it passes every
// request on, counts and times the registrations, and answers the n-th
// registration of a case (from 1) with 503 while fail(n) says so.
type gameFront struct {
	service *httputil.ReverseProxy
	mu      sync.Mutex
	fail    func(n int) bool
	hits    []time.Time
}

// gameUnavailable is the stand-in's message for its 503s.
const gameUnavailable = "The service is over its memory budget; try again shortly."

func (f *gameFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/auth/auth-code") {
		f.mu.Lock()
		f.hits = append(f.hits, time.Now())
		n, fail := len(f.hits), f.fail
		f.mu.Unlock()
		if fail != nil && fail(n) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error": {"code": "unavailable", "message": %q}}`, gameUnavailable)
			return
		}
	}
	f.service.ServeHTTP(w, r)
}

// reset starts a case: no registrations yet, and fail for the 503s.
func (f *gameFront) reset(fail func(n int) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.hits = fail, nil
}

func (f *gameFront) registrations() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.hits...)
}

// gameCase is one deep link opened in the browser and what must follow.
type gameCase struct {
	name string
	fail func(n int) bool // the front's 503s; nil: none
	// open is the URL the browser opens: the webshop's link, or a deep
	// link made by hand (what a tampered link would be).
	open func(link, game, callback, store string) string
	// Signed in (code empty), or the error page with this code and text.
	code, text    string
	registrations int
}

func gameDeepLink(game, redirectURI, challenge, store string) string {
	return game + "?" + url.Values{"redirect_uri": {redirectURI}, "state": {"a-state"}, "code_challenge": {challenge},
		"code_challenge_method": {"S256"}, "store_id": {store}}.Encode()
}

var gameCases = []gameCase{
	{name: "signed in", registrations: 1,
		open: func(link, _, _, _ string) string { return link }},
	{name: "503 then retried", registrations: 2, fail: func(n int) bool { return n == 1 },
		open: func(link, _, _, _ string) string { return link }},
	{name: "422 a tampered challenge", registrations: 1, code: "validation_failed", text: "code_challenge",
		open: func(_, game, callback, store string) string { return gameDeepLink(game, callback, "tampered", store) }},
	{name: "400 a redirect_uri on another host", registrations: 1, code: "redirect_uri_not_allowed",
		open: func(_, game, _, store string) string {
			return gameDeepLink(game, "https://evil.example/callback", ctChallenge(ctRandom()), store)
		}},
	{name: "a link for another store", registrations: 0, code: "wrong_store", text: "for another store",
		open: func(_, game, callback, _ string) string {
			return gameDeepLink(game, callback, ctChallenge(ctRandom()), ctNoSuch)
		}},
	{name: "503 every time", registrations: 3, code: "unavailable", text: gameUnavailable,
		fail: func(int) bool { return true },
		open: func(link, _, _, _ string) string { return link }},
}

// TestGameExample runs every case of gameCases with every example of
// gameExamples, one store each, in one browser.
func TestGameExample(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	ctx := browser(t, 1280)

	// The service, behind a public front (its public_base_url, so known
	// before it starts); each example's registrations go through a
	// gameFront of its own.
	var service atomic.Pointer[url.URL]
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httputil.NewSingleHostReverseProxy(service.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(public.Close)
	type lang struct {
		gameExample
		store, key, addr string
		front            *gameFront
		api              *httptest.Server
	}
	var langs []*lang
	var stores []map[string]any
	for i, ex := range gameExamples {
		addr, err := ctFreeAddr()
		require.NoError(t, err)
		l := &lang{gameExample: ex, addr: addr, front: &gameFront{},
			store: fmt.Sprintf("5d4b0d3e-9999-4000-8000-00000000000%d", i), key: "ak_test_game_" + ex.name}
		l.front.service = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(service.Load()) }}
		l.api = httptest.NewServer(l.front)
		t.Cleanup(l.api.Close)
		langs = append(langs, l)
		stores = append(stores, map[string]any{"id": l.store, "name": "Game " + ex.name, "api_keys": []string{l.key},
			"redirect_domains": []string{"127.0.0.1"}, "game_authorize_url": "http://" + addr + "/oauth/authorize"})
	}
	base := startBinary(t, map[string]any{
		"public_base_url": public.URL,
		"webhooks":        map[string]any{"allow_insecure_urls": true}, // http://127.0.0.1 redirect_uris
		"stores":          stores,
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	service.Store(u)

	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			startGameExample(t, l.argv(t), l.addr, []string{"PORT=" + strings.TrimPrefix(l.addr, "127.0.0.1:"),
				"DEEPLINK_API_BASE=" + l.api.URL, "DEEPLINK_STORE_ID=" + l.store, "DEEPLINK_API_KEY=" + l.key})
			game := "http://" + l.addr + "/oauth/authorize"
			me := "/stores/" + l.store + "/auth/me"
			link := public.URL + "/stores/" + l.store + "/auth/link?return_to=" + url.QueryEscape(me)
			callback := public.URL + "/stores/" + l.store + "/auth/callback"
			for _, c := range gameCases {
				t.Run(c.name, func(t *testing.T) {
					l.front.reset(c.fail)
					require.NoError(t, chromedp.Do(ctx, clearCookies(), chromedp.Navigate(c.open(link, game, callback, l.store))))
					loc, err := chromedp.Run(ctx, chromedp.Location())
					require.NoError(t, err)
					page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector("pre") ?? document.body).innerText`))
					require.NoError(t, err)
					if c.code == "" {
						assert.Equal(t, public.URL+me, loc, "where the callback sent the browser")
						var got struct{ Data struct{ Player Player } }
						require.NoError(t, json.Unmarshal([]byte(page), &got), "GET …/auth/me in the browser: %s", page)
						assert.Equal(t, "player-42", got.Data.Player.ClientReferenceID, "the signed-in player's id")
						assert.Equal(t, "Ada", got.Data.Player.FirstName, "the signed-in player's first name")
					} else {
						assert.True(t, strings.HasPrefix(loc, game+"?"), "the browser stays on the example's page: at %s", loc)
						assert.Contains(t, page, "Sign-in failed", "the example's error page")
						assert.Contains(t, page, "Error code: "+c.code, "the service's error code")
						assert.Contains(t, page, c.text, "the service's message or field")
					}
					hits := l.front.registrations()
					assert.Len(t, hits, c.registrations, "registrations the example made")
					for i := 1; i < len(hits); i++ {
						assert.GreaterOrEqual(t, hits[i].Sub(hits[i-1]), 900*time.Millisecond, "retry %d after Retry-After: 1", i)
					}
				})
			}
		})
	}
}

// clearCookies ends any session a case before left in the browser.
func clearCookies() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		return tg.Call(ctx, "Network.clearBrowserCookies", nil, nil)
	})
}

// startGameExample runs argv with env on addr for the test, and returns
// once it answers HTTP there.
func startGameExample(t *testing.T, argv []string, addr string, env []string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	logf, err := os.Create(log)
	require.NoError(t, err)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start(), "starting %v", argv)
	p := &proc{cmd: cmd, exited: make(chan struct{}), logPath: log}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%v's output:\n%s", argv, ctTail(log))
		}
	})
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := c.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%v exited before it served: %v\n%s", argv, p.err, ctTail(log))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v does not serve on %s within a minute\n%s", argv, addr, ctTail(log))
		}
	}
}
