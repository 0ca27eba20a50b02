//go:build !wasip1 && !nobrowser

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBrowserSettings walks each control of the Settings page in
// Chromium, at 1280 px and at 360 px: Save of a URL refused with its
// reason, Save of a long URL, Check association files against it, a
// custom scheme saved with its warning, Create API key → the key shown
// once → Copy, Revoke (confirmed) → gone, an empty URL turning sign-in
// off, and Revoke of the key the session signed in with → the sign-in
// page saying why.
func TestBrowserSettings(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	const storeWide, storeNarrow, key = "5d4b0d3e-7777-4000-8000-0000000000e1", "5d4b0d3e-7777-4000-8000-0000000000e2", "ak_test_browser_settings"
	store := func(id string) map[string]any {
		return map[string]any{"id": id, "name": "Acme Games", "api_keys": []string{key},
			"redirect_domains": []string{"shop.example.com"}, "game_authorize_url": "https://game.example.com/oauth/authorize"}
	}
	base := startBinary(t, map[string]any{"stores": []map[string]any{store(storeWide), store(storeNarrow)}})
	for _, tc := range []struct {
		width int
		store string
	}{{1280, storeWide}, {360, storeNarrow}} {
		t.Run(fmt.Sprint(tc.width), func(t *testing.T) {
			walkSettings(t, base, tc.store, key, tc.width)
		})
	}
}

// walkSettings is TestBrowserSettings at one width, for store.
func walkSettings(t *testing.T, base, store, key string, width int) {
	ctx := browser(t, width)
	if width < 1280 {
		// A headless window keeps a minimum width of its own: the page's
		// viewport is set as a phone's.
		require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), 800)))
	}
	// The page's Copy writes to the clipboard as it would for a person;
	// the test reads it back.
	require.NoError(t, chromedp.FromContext(ctx).Browser.Call(ctx, "Browser.grantPermissions", map[string]any{
		"origin": base, "permissions": []string{"clipboardReadWrite", "clipboardSanitizedWrite"},
	}, nil), "granting the clipboard")
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		doSteps(t, ctx, what, steps...)
	}
	value := func(sel chromedp.Search) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Value(sel))
		require.NoError(t, err, "value of %s", sel)
		return v
	}
	count := func(sel chromedp.Search) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.evaluate(%q, document, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null).snapshotLength`, string(sel))))
		require.NoError(t, err, "count of %s", sel)
		return n
	}
	// api calls the store's settings with k and returns the status and
	// the data.
	api := func(path, k string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/stores/"+store+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", k)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct {
			Data map[string]any `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Data
	}
	gameURL := func() any {
		t.Helper()
		status, v := api("/settings", key)
		require.Equal(t, http.StatusOK, status, "GET settings")
		return v["game_authorize_url"]
	}
	// fits checks, at 360 px, that the page does not scroll sideways and
	// that every control of main is within the viewport's width.
	fits := func(page string) {
		t.Helper()
		if width >= 1280 {
			return
		}
		checkLayout(t, ctx, page, []layoutCheck{
			{"no sideways scroll", `document.documentElement.scrollWidth <= window.innerWidth`},
			{"every control within the screen's width", `[...document.querySelectorAll("main input:not([type=hidden]), main button, main a, main .field-error, main .alert")].every(el => {
				const r = el.getBoundingClientRect();
				return r.left >= 0 && r.right <= innerWidth + 0.5;
			})`},
		})
	}
	alert := func(text string) chromedp.Search {
		return xpath(fmt.Sprintf(`//p[contains(@class, "alert") and contains(., %q)]`, text))
	}

	do("sign in, to Settings",
		chromedp.Navigate(base+"/dashboard/sign-in"),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), key),
		follow(button("Sign in")),
		follow(link("Settings")),
		chromedp.WaitVisible(field("Game Authorize URL")),
		chromedp.WaitVisible(xpath(fmt.Sprintf(`//dd[normalize-space(.)=%q]`, store))),
		chromedp.WaitVisible(xpath(`//dd/code[normalize-space(.)="shop.example.com"]`)),
		chromedp.WaitVisible(xpath(`//h2[normalize-space(.)="API keys"]`)),
	)
	assert.Equal(t, "Acme Games", value(field("Name")))
	assert.Equal(t, "https://game.example.com/oauth/authorize", value(field("Game Authorize URL")))
	assert.Equal(t, 1, count(xpath(`//li[contains(., "the configuration file")]`)), "the file's key in the list")
	assert.Zero(t, count(link("Revoke")), "Revoke of the file's key")
	fits("Settings")

	do("a refused URL",
		chromedp.SetValue(field("Game Authorize URL"), "javascript:alert(1)"),
		follow(button("Save")),
		chromedp.WaitVisible(xpath(`//p[@class="field-error" and contains(., "Game Authorize URL must be an absolute https URL")]`)),
	)
	assert.Equal(t, "javascript:alert(1)", value(field("Game Authorize URL")), "the field after the refusal")
	assert.Equal(t, "https://game.example.com/oauth/authorize", gameURL(), "the URL after the refusal")
	fits("a refusal")

	long := "https://play.example.com/" + strings.Repeat("authorize/", 30) + "end"
	do("save a long URL, check its association files",
		chromedp.SetValue(field("Game Authorize URL"), long),
		follow(button("Save")),
		chromedp.WaitVisible(alert("Settings saved.")),
		follow(button("Check association files")),
		chromedp.WaitVisible(xpath(`//h3/code[normalize-space(.)="https://play.example.com/.well-known/apple-app-site-association"]`)),
		chromedp.WaitVisible(xpath(`//p[contains(., "Not checked: no Apple app is configured")]`)),
	)
	assert.Equal(t, long, value(field("Game Authorize URL")))
	assert.Equal(t, long, gameURL(), "the URL saved")
	fits("a long URL")

	do("a custom scheme",
		chromedp.SetValue(field("Game Authorize URL"), "mygame://authorize"),
		follow(button("Save")),
		chromedp.WaitVisible(alert("Settings saved.")),
		chromedp.WaitVisible(alert("can be claimed by any app installed")),
	)
	assert.Equal(t, "mygame://authorize", gameURL(), "the custom scheme saved")
	fits("a custom scheme's warning")

	do("Create API key, Copy",
		chromedp.SendKeys(field("Label"), "CI deploys"),
		follow(button("Create API key")),
		chromedp.WaitVisible(button("Copy")),
	)
	made := value(field("API key"))
	require.Regexp(t, `^ak_[A-Za-z0-9_-]{43}$`, made, "the key shown")
	fits("a new key")
	do("Copy", chromedp.Click(button("Copy")), chromedp.WaitVisible(button("Copied")))
	copied, err := chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err, "reading the clipboard")
	assert.Equal(t, made, copied, "the clipboard after Copy")
	status, _ := api("/settings", made)
	assert.Equal(t, http.StatusOK, status, "the new key with the API")

	do("the key once",
		follow(link("Back to settings")),
		chromedp.WaitVisible(xpath(`//strong[normalize-space(.)="CI deploys"]`)),
		shotAt(width, "settings"),
		chromedp.Navigate(base+"/dashboard/settings/new-key"),
		chromedp.WaitVisible(xpath(`//h2[normalize-space(.)="API keys"]`)),
	)
	assert.Zero(t, count(xpath(fmt.Sprintf(`//*[contains(., %q)] | //input[@value=%q]`, made, made))), "the key on the page opened again")
	assert.Equal(t, 1, count(xpath(fmt.Sprintf(`//code[normalize-space(.)=%q]`, made[:12]+"…"))), "the key's first characters in the list")
	assert.Equal(t, 1, count(link("Revoke")), "Revoke, on the new key only")

	do("Revoke, confirmed",
		follow(link("Revoke")),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Revoke API key"]`)),
		follow(button("Revoke")),
		chromedp.WaitVisible(alert("API key revoked.")),
	)
	assert.Zero(t, count(xpath(`//strong[normalize-space(.)="CI deploys"]`)), "the revoked key in the list")
	assert.Zero(t, count(link("Revoke")), "Revoke, once the key is gone")
	status, _ = api("/settings", made)
	assert.Equal(t, http.StatusUnauthorized, status, "the revoked key with the API")

	do("an empty URL turns sign-in off",
		chromedp.Clear(field("Game Authorize URL")),
		follow(button("Save")),
		chromedp.WaitVisible(alert("Settings saved.")),
	)
	assert.Nil(t, gameURL(), "the URL saved empty")
	status, cfg := api("/auth/config", key)
	require.Equal(t, http.StatusOK, status, "GET auth/config")
	assert.Equal(t, false, cfg["link_to_game"], "auth/config once the URL is empty")

	do("sign in with a key of the merchant area",
		chromedp.SendKeys(field("Label"), "mine"),
		follow(button("Create API key")),
		chromedp.WaitVisible(button("Copy")),
	)
	mine := value(field("API key"))
	do("revoke the session's own key",
		follow(button("Sign out")),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), mine),
		follow(button("Sign in")),
		follow(link("Settings")),
		follow(link("Revoke")),
		chromedp.WaitVisible(xpath(`//p[contains(., "revoking it ends this session")]`)),
		follow(button("Revoke")),
		chromedp.WaitVisible(button("Sign in")),
		chromedp.WaitVisible(xpath(`//p[@role="status" and contains(., "You revoked the API key this session was signed in with")]`)),
	)
	fits("the sign-in page after revoking the session's key")
	status, _ = api("/settings", mine)
	assert.Equal(t, http.StatusUnauthorized, status, "the session's revoked key with the API")
}

// shotAt writes the page's screenshot as docs/screenshots/name.png when
// the test runs with -update-screenshots, from the walk at 1280 px only.
func shotAt(width int, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if !*updateScreenshots || width != 1280 {
			return nil
		}
		b, err := chromedp.FullScreenshot(100)(ctx, t)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join("docs", "screenshots", name+".png"), b, 0o644)
	})
}
