//go:build !wasip1 && !nobrowser

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Browser tests: the real binary, driven in headless Chromium as a person
// would, finding every control by its visible label. ./test.sh installs
// Chromium; without it these tests skip. The build tag nobrowser leaves
// them (and examples_game_test.go's walks) out of a build: ./test.sh's
// fuzzing, which would otherwise instrument chromedp's 63 packages.

var updateScreenshots = flag.Bool("update-screenshots", false, "write the dashboard's screenshots in docs/screenshots")

// browser starts headless Chromium for the test, at width × 900.
func browser(t *testing.T, width int) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("Chromium is not installed; ./test.sh installs it (Debian package chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(width, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	// Bounded, with room for a machine busy with other tests: the race
	// detector's run of the whole suite shares the cores with Chromium.
	ctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "starting Chromium")
	return ctx
}

// Finding controls as a person would: by their words (XPath searches).
func byText(tag, text string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(`//%s[normalize-space(.)=%q]`, tag, text))
}
func button(text string) chromedp.Search { return byText("button", text) }
func link(text string) chromedp.Search   { return byText("a", text) }

// doSteps runs steps one at a time, each within a minute, and names the
// one that fails (what, its number) and the page it was on.
func doSteps(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	for i, step := range steps {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := chromedp.Do(sctx, step)
		cancel()
		if err != nil {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			t.Fatalf("%s: step %d of %d: %v (on %s)", what, i+1, len(steps), err, loc)
		}
	}
}

// xpath is a search by an XPath query.
func xpath(q string) chromedp.Search { return chromedp.Search(q) }

// field is the input a label names, by its for attribute or by wrapping it.
func field(label string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(`//*[@id=string(//label[normalize-space(.)=%q]/@for)] | //label[normalize-space(.)=%q]/input`, label, label))
}

// follow clicks a control that leads to another page and waits for that
// page's load event: a control found while the last page is still going
// away, or while the next is still arriving, is lost with it ("Could not
// find node with given id").
func follow(sel chromedp.Search) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.WaitEvent(cdppage.LoadEventFired, nil, chromedp.Click(sel))(ctx, t)
		return err
	})
}

// startBinary runs the service's binary with cfg (nil: the embedded demo)
// and returns its base URL once it is ready.
func startBinary(t *testing.T, cfg map[string]any) string {
	t.Helper()
	art, err := buildNative()
	require.NoError(t, err)
	dir := t.TempDir()
	addr, err := ctFreeAddr()
	require.NoError(t, err)
	args := []string{art.native, "-addr", addr, "-data", filepath.Join(dir, "data")}
	if cfg != nil {
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		f := filepath.Join(dir, "config.json")
		require.NoError(t, os.WriteFile(f, b, 0o600))
		args = append(args, "-config", f)
	}
	p, err := ctLaunch(args, filepath.Join(dir, "log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	base := "http://" + addr
	require.NoError(t, p.waitReady(base, time.Minute))
	return base
}

// TestBrowserDemoSignIn clicks through the demo at 127.0.0.1 and at
// localhost, whose cookies the browser keeps apart: Link to game, the
// game app's question, Continue, signed in, Sign out; and a callback
// opened out of turn explains itself and links back.
func TestBrowserDemoSignIn(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	ctx := browser(t, 1280)
	base := startBinary(t, nil)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		t.Run(host, func(t *testing.T) {
			shop := strings.Replace(base, "127.0.0.1", host, 1)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Navigate(shop+"/cart"),
				follow(link("Link to game")),
				chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Continue as Ada?"]`)),
				follow(button("Continue")),
				chromedp.WaitVisible(xpath(`//*[@id="me" and contains(., "Signed in as Ada Lovelace")]`)),
			))
			loc, err := chromedp.Run(ctx, chromedp.Location())
			require.NoError(t, err)
			assert.Equal(t, shop+"/cart", loc, "back where the player started, on the host the browser used")
			shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("account")))
			require.NoError(t, err)
			assert.NotContains(t, shown, "{", "no raw JSON")
			require.NoError(t, chromedp.Do(ctx,
				follow(button("Sign out")),
				chromedp.WaitVisible(link("Link to game")),
			))
		})
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(xpath(`//h2[normalize-space(.)="Season pass"]`))))
	checkLayout(t, ctx, "the shop", []layoutCheck{{"each product has a picture of its own, drawn without an emoji font", `(() => {
		const arts = [...document.querySelectorAll(".item .art")];
		return arts.length === 3 && arts.every(a => a.textContent.trim() === "" && a.querySelector("svg")?.getBoundingClientRect().width >= 32);
	})()`}})
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/stores/"+benchStoreID+"/auth/callback?code=x&state=y"),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Sign-in failed"]`)),
	))
	checkLayout(t, ctx, "a callback out of turn", []layoutCheck{authPageStyled})
	require.NoError(t, chromedp.Do(ctx,
		follow(link("Back to the shop")),
		chromedp.WaitVisible(link("Link to game")),
	))
	// Cancel in the game app: said in plain words, and back to the cart.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/cart"),
		follow(link("Link to game")),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Continue as Ada?"]`)),
		follow(link("Cancel")),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Sign-in cancelled"]`)),
		chromedp.WaitVisible(xpath(`//p[contains(., "You cancelled the sign-in in the game.")]`)),
	))
	checkLayout(t, ctx, "Cancel in the game app", []layoutCheck{authPageStyled})
	require.NoError(t, chromedp.Do(ctx,
		follow(link("Back to the shop")),
		chromedp.WaitVisible(link("Link to game")),
	))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, base+"/cart", loc, "back where the player started")
}

// authPageStyled holds on a page of the browser flow (web/auth) whose
// style sheet applies: its CSP lets it.
var authPageStyled = layoutCheck{"the page is styled", `getComputedStyle(document.querySelector("main")).backgroundColor === "rgb(255, 255, 255)" &&
	getComputedStyle(document.body).fontFamily.includes("system-ui")`}

// TestBrowserDashboard walks the merchant dashboard in Chromium: sign-in
// (wrong key, then right), add an endpoint and see its secret once, send
// a test event and watch it turn succeeded without a reload, filter,
// open an attempt, retry, recover, rotate, disable, enable, delete, sign out; and
// a cross-site form post refused.
func TestBrowserDashboard(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	ctx := browser(t, 1280)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the first delivery waits, so the page sees it pending
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(recv.Close)
	t.Cleanup(open)
	const store, key = "5d4b0d3e-7777-4000-8000-0000000000d1", "ak_test_browser_dashboard"
	base := startBinary(t, map[string]any{
		"webhooks": map[string]any{"allow_insecure_urls": true, "timeout": "30s", "retry_schedule": []string{"1s"}},
		"stores":   []map[string]any{{"id": store, "name": "Acme Games", "api_keys": []string{key}, "game_authorize_url": "https://game.example.com/oauth/authorize"}},
	})
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			if !*updateScreenshots {
				return nil
			}
			b, err := chromedp.FullScreenshot(100)(ctx, t)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join("docs", "screenshots", name+".png"), b, 0o644)
		})
	}
	// present waits for an element the page's script may replace at any
	// moment (the rows it refreshes): polled in the page, not by node.
	present := func(css string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](fmt.Sprintf("document.querySelector(%q) !== null", css))(ctx, tg)
			return err
		})
	}
	// do runs steps one at a time, each within a minute, and names the
	// one that fails and the page it was on.
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		doSteps(t, ctx, what, steps...)
	}
	text := func(sel chromedp.Search) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel, chromedp.NodeVisible))
		require.NoError(t, err, "text of %s", sel)
		return v
	}
	value := func(sel chromedp.Search) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Value(sel))
		require.NoError(t, err, "value of %s", sel)
		return v
	}

	do("a wrong key",
		chromedp.Navigate(base+"/dashboard"),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), "ak_wrong"),
		follow(button("Sign in")),
		chromedp.WaitVisible(xpath(`//*[@role="alert"]`)),
	)
	assert.Contains(t, text(xpath(`//*[@role="alert"]`)), "do not match")
	do("the right key",
		chromedp.Navigate(base+"/dashboard/sign-in"),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), key),
		shot("sign-in"),
		follow(button("Sign in")),
		chromedp.WaitVisible(link("Add endpoint")),
		chromedp.WaitVisible(link("Settings")),
	)

	do("add an endpoint",
		follow(link("Add endpoint")),
		chromedp.SendKeys(field("URL"), recv.URL+"/hooks"),
		chromedp.SendKeys(field("Description"), "Order updates for the shop backend"),
		follow(button("Save")),
		chromedp.WaitVisible(button("Copy")),
		shot("secret"),
	)
	secret := value(field("Signing secret"))
	assert.True(t, strings.HasPrefix(secret, "whsec_"), "the secret after saving: %q", secret)

	do("a test event, pending",
		follow(link("Back to webhooks")),
		follow(button("Send test event")),
		chromedp.WaitVisible(button("Apply")),
		present(`tr[data-status="pending"]`),
		chromedp.Evaluate[chromedp.Void](`window.stillHere = "yes"`),
	)
	open()
	do("the test event, succeeded without a reload",
		present(`tr[data-status="succeeded"]`),
		shot("deliveries"),
	)
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.stillHere`))
	require.NoError(t, err)
	assert.Equal(t, "yes", marker, "the row turned succeeded in the same page")

	do("filter by status",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("status").value = "failed"`),
		follow(button("Apply")),
		chromedp.WaitVisible(xpath(`//td[contains(., "No deliveries match")]`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("status").value = "succeeded"`),
		follow(button("Apply")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-status="succeeded"]`)),
	)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr[data-status]").length`))
	require.NoError(t, err)
	assert.Equal(t, 1, rows, "succeeded deliveries")

	do("an attempt's details",
		follow(link("Open")),
		chromedp.WaitVisible(button("Retry")),
		shot("delivery"),
	)
	for _, dt := range []string{"Created", "Time"} { // one form of time, the dashboard's
		when := text(xpath(fmt.Sprintf(`(//dt[normalize-space(.)=%q])[1]/following-sibling::dd[1]`, dt)))
		assert.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`, when, "the delivery's %s", dt)
	}
	attempt := text(xpath(`//section[contains(@class, "attempt")]`))
	assert.Contains(t, attempt, "X-Webhook-Signature")
	assert.Contains(t, attempt, "Attempt 1")
	do("retry",
		follow(button("Retry")),
		chromedp.WaitVisible(xpath(`//p[contains(., "Delivery queued again")]`)),
	)

	do("recover",
		chromedp.Evaluate[chromedp.Void](`document.getElementById("since").value = "2020-01-01T00:00"`),
		follow(button("Recover")),
		chromedp.WaitVisible(xpath(`//p[contains(., "No failed delivery since then")]`)),
	)

	do("rotate the secret",
		follow(link("Webhooks")),
		follow(button("Rotate secret")),
		chromedp.WaitVisible(button("Copy")),
	)
	rotated := value(field("Signing secret"))
	assert.NotEqual(t, secret, rotated)
	assert.True(t, strings.HasPrefix(rotated, "whsec_"))

	do("disable and enable",
		follow(link("Back to webhooks")),
		follow(button("Disable")),
		chromedp.WaitVisible(xpath(`//span[contains(@class, "badge") and starts-with(normalize-space(.), "Disabled")]`)),
		follow(button("Enable")),
		chromedp.WaitVisible(xpath(`//span[contains(@class, "badge") and normalize-space(.)="Enabled"]`)),
		shot("webhooks"),
	)

	// A page of another site (localhost is not 127.0.0.1) posting to the
	// dashboard: refused, and the endpoint stays enabled.
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(link("Deliveries"), "href"))
	require.NoError(t, err)
	id := strings.TrimSuffix(strings.TrimPrefix(href.Value, "/dashboard/webhooks/"), "/deliveries")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/dashboard/webhooks/%s/disable"><input name="csrf" value="guess"></form><script>document.forms[0].submit()</script>`, base, id)
	}))
	t.Cleanup(evil.Close)
	do("a cross-site post",
		chromedp.Navigate(strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Refused"]`)),
		chromedp.Navigate(base+"/dashboard/webhooks"),
		chromedp.WaitVisible(link("Add endpoint")),
	)
	assert.Equal(t, "Enabled", strings.TrimSpace(text(chromedp.Search(`//span[contains(@class, "badge")]`))), "after the cross-site post")

	do("settings",
		follow(link("Settings")),
		chromedp.WaitVisible(field("Game Authorize URL")),
	)
	assert.Equal(t, "https://game.example.com/oauth/authorize", value(field("Game Authorize URL")), "the Game Authorize URL on the Settings page")
	do("check the association files",
		follow(button("Check association files")),
		chromedp.WaitVisible(xpath(`//p[contains(., "Not checked: no Apple app is configured")]`)),
	)

	do("delete, confirmed",
		follow(link("Webhooks")),
		chromedp.WaitVisible(link("Add endpoint")),
		follow(link("Delete")),
		chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Delete endpoint"]`)),
		follow(button("Delete")),
		chromedp.WaitVisible(xpath(`//h2[normalize-space(.)="No endpoints yet"]`)),
	)

	do("sign out",
		follow(button("Sign out")),
		chromedp.WaitVisible(button("Sign in")),
		chromedp.Navigate(base+"/dashboard/webhooks"),
		chromedp.WaitVisible(button("Sign in")),
	)
}

// TestBrowserNarrowScreen: at 360 px wide, no dashboard page scrolls
// sideways.
func TestBrowserNarrowScreen(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	ctx := browser(t, 360)
	// A headless window keeps a minimum width of its own: the page's
	// viewport is set as a phone's.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(360, 800)))
	const store, key = "5d4b0d3e-7777-4000-8000-0000000000d2", "ak_test_browser_narrow"
	base := startBinary(t, map[string]any{
		"webhooks": map[string]any{"allow_insecure_urls": true},
		"stores":   []map[string]any{{"id": store, "name": "Acme Games", "api_keys": []string{key}}},
	})
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/dashboard/sign-in"),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), key),
		follow(button("Sign in")),
		chromedp.WaitVisible(link("Add endpoint")),
		follow(link("Add endpoint")),
		chromedp.SendKeys(field("URL"), "http://127.0.0.1:9/a-rather-long-path/for/the/narrow/screen/of/a/phone"),
		follow(button("Save")),
		chromedp.WaitVisible(button("Copy")),
	))
	for _, path := range []string{"/dashboard/sign-in", "/dashboard/webhooks", "/dashboard/settings", "/dashboard/webhooks/new"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("footer"))))
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, wide, "%s scrolls sideways at 360 px", path)
	}
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.innerWidth`))
	require.NoError(t, err)
	require.Equal(t, 360, width, "the viewport's width")
	for _, page := range []struct {
		name   string
		steps  []chromedp.Action[chromedp.Void]
		checks []layoutCheck
	}{
		{"Deliveries", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/dashboard/webhooks"), follow(button("Send test event")), chromedp.WaitVisible(button("Apply"))}, []layoutCheck{
			{"every header reads whole", `[...document.getElementById("rows").closest("table").querySelectorAll("th")].every(th => th.scrollWidth <= th.clientWidth)`},
			{"a table wider than its card scrolls inside it, and the page says so", `(() => {
				const box = document.getElementById("rows").closest("table").parentElement;
				return box.scrollWidth <= box.clientWidth ||
					(getComputedStyle(box).overflowX === "auto" && document.getElementById("scroll-hint")?.checkVisibility() === true);
			})()`},
			{"every header and Open can be scrolled into the card and the viewport", `(() => {
				const box = document.getElementById("rows").closest("table").parentElement;
				const open = [...document.querySelectorAll("tr[data-status] a")].filter(a => a.textContent.trim() === "Open");
				const heads = [...document.getElementById("rows").closest("table").querySelectorAll("th")].filter(th => !th.querySelector(".sr"));
				return open.length === 1 && [...heads, ...open].every(el => {
					el.scrollIntoView({block: "nearest", inline: "nearest"});
					const r = el.getBoundingClientRect(), b = box.getBoundingClientRect();
					return r.left >= Math.max(0, b.left) - 0.5 && r.right <= Math.min(innerWidth, b.right) + 0.5;
				});
			})()`},
			{"the event id is one line, in view, and opens the delivery", `(() => {
				document.getElementById("rows").closest("table").parentElement.scrollLeft = 0;
				const a = document.querySelector("tr[data-status] td:first-child a");
				const open = [...document.querySelectorAll("tr[data-status] a")].find(a => a.textContent.trim() === "Open");
				if (!a?.querySelector("code")) return false;
				const r = a.getBoundingClientRect();
				return a.querySelector("code").textContent.startsWith("evt_") && a.querySelector("code").getClientRects().length === 1 &&
					r.left >= 0 && r.right <= innerWidth && a.href === open.href;
			})()`},
		}},
		{"a delivery", []chromedp.Action[chromedp.Void]{follow(link("Open")), chromedp.WaitVisible(button("Retry"))}, []layoutCheck{
			{"Retry stands clear of the card below it", `(() => {
				const retry = [...document.querySelectorAll("button")].find(b => b.textContent.trim() === "Retry").getBoundingClientRect();
				return document.querySelector("section.card").getBoundingClientRect().top - retry.bottom >= 8;
			})()`},
		}},
		{"Add endpoint", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/dashboard/webhooks/new"), chromedp.WaitVisible(button("Save"))}, []layoutCheck{
			{"Save and Cancel stand on one line, top and bottom", `(() => {
				const [save, cancel] = ["Save", "Cancel"].map(w => [...document.querySelectorAll("form button, form a")].find(e => e.textContent.trim() === w).getBoundingClientRect());
				return Math.abs(save.top - cancel.top) < 1 && Math.abs(save.bottom - cancel.bottom) < 1;
			})()`},
		}},
		{"a store's link without a Game Authorize URL", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/stores/" + store + "/auth/link?return_to=/dashboard/webhooks"), chromedp.WaitVisible(xpath(`//h1[normalize-space(.)="Sign-in is not set up"]`))}, []layoutCheck{
			authPageStyled,
			{"the way back is in view", `(() => {
				const r = [...document.querySelectorAll("a")].find(a => a.textContent.trim() === "Back to the shop").getBoundingClientRect();
				return r.left >= 0 && r.right <= innerWidth && r.bottom <= innerHeight && new URL(document.querySelector("main a").href).pathname === "/dashboard/webhooks";
			})()`},
		}},
		{"a secret", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/dashboard/webhooks"), follow(button("Reveal secret")), chromedp.WaitVisible(button("Copy"))}, nil},
		{"an error", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/dashboard/no-such-page"), chromedp.WaitReady(chromedp.CSS("footer"))}, nil},
	} {
		require.NoError(t, chromedp.Do(ctx, page.steps...), page.name)
		wide, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
		require.NoError(t, err)
		assert.False(t, wide, "%s scrolls sideways at 360 px", page.name)
		checkLayout(t, ctx, page.name, page.checks)
	}
}

// layoutCheck is a JavaScript expression that is true when what name says
// holds on the page shown.
type layoutCheck struct{ name, js string }

// checkLayout evaluates each check on the page shown.
func checkLayout(t *testing.T, ctx context.Context, page string, checks []layoutCheck) {
	t.Helper()
	for _, c := range checks {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](c.js))
		require.NoError(t, err, "%s: %s", page, c.name)
		assert.True(t, ok, "%s: %s", page, c.name)
	}
}
