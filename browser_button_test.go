//go:build !wasip1 && !nobrowser

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserButton walks the drop-in button as a studio deploys it: a
// shop page and the service under one host (a reverse proxy), the page
// with the CSP default-src 'self' and the one tag. No button while the
// store has no Game Authorize URL; set on the dashboard's Settings page
// (signed in with the store's key: "Game Authorize URL", "Save"), the button
// is there at the next load; Link to game → the game app (which registers
// the code and sends the browser back, as a game backend does) → the
// callback → back on the shop page with the player's name; Sign out →
// the button again, after a reload too, and the old token refused.
func TestBrowserButton(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	ctx := browser(t, 1280)
	const store, key = "5d4b0d3e-8888-4000-8000-0000000000b1", "ak_test_browser_button"

	var service atomic.Pointer[url.URL]
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/shop" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", "default-src 'self'")
			fmt.Fprintf(w, `<!doctype html><title>Shop</title><h1>The shop</h1>
<p>Account: <span data-deeplink-button></span></p>
<script src="/stores/%s/auth/button.js" async></script>`, store)
			return
		}
		httputil.NewSingleHostReverseProxy(service.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(shop.Close)

	// The game app: it registers a code for the deep link's challenge with
	// the store's key, then sends the browser back with it.
	game := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		back := q.Get("redirect_uri") // decoded once, used for both
		code := newAuthCode(t)
		body, _ := json.Marshal(map[string]string{
			"auth_code": code, "redirect_uri": back, "code_challenge": q.Get("code_challenge"), "state": q.Get("state"),
			"client_reference_id": "player-7", "first_name": "Grace", "last_name": "Hopper",
		})
		req, _ := http.NewRequest(http.MethodPost, shop.URL+"/stores/"+q.Get("store_id")+"/auth/auth-code", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			http.Error(w, fmt.Sprintf("registering failed: %v %v", resp, err), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		u, _ := url.Parse(back)
		bq := u.Query()
		bq.Set("code", code)
		bq.Set("state", q.Get("state"))
		u.RawQuery = bq.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}))
	t.Cleanup(game.Close)

	base := startBinary(t, map[string]any{
		"public_base_url": shop.URL,
		"webhooks":        map[string]any{"allow_insecure_urls": true},
		"stores": []map[string]any{{"id": store, "name": "Acme Games", "api_keys": []string{key},
			"redirect_domains": []string{"127.0.0.1"}}},
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	service.Store(u)

	state := func(want string) chromedp.Action[chromedp.Void] {
		return chromedp.WaitVisible(xpath(fmt.Sprintf(`//*[@data-deeplink-button and @data-state=%q]`, want)))
	}
	page := shop.URL + "/shop?item=gems"
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(page), state("off")), "the shop page while sign-in is off")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("[data-deeplink-button] a, [data-deeplink-button] button").length`))
	require.NoError(t, err)
	require.Zero(t, n, "controls shown while sign-in is off")

	// The merchant turns sign-in on in the merchant area.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/dashboard/sign-in"),
		chromedp.SendKeys(field("Store ID"), store),
		chromedp.SendKeys(field("API key"), key),
		follow(button("Sign in")),
		follow(link("Settings")),
		chromedp.SendKeys(field("Game Authorize URL"), game.URL+"/authorize"),
		follow(button("Save")),
		chromedp.WaitVisible(xpath(`//p[@role="status" and normalize-space(.)="Settings saved."]`)),
	), "the Game Authorize URL set on the dashboard's Settings page")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(page), state("link"),
		follow(link("Link to game")),
		state("signed-in"),
		chromedp.WaitVisible(xpath(`//*[@data-deeplink-button]//*[normalize-space(.)="Grace"]`)),
	), "Link to game, through the game app, back signed in")
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, page, loc, "back on the page the player left")

	var token string
	require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var res struct {
			Cookies []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"cookies"`
		}
		if err := tg.Call(ctx, "Network.getCookies", map[string]any{"urls": []string{shop.URL}}, &res); err != nil {
			return err
		}
		for _, c := range res.Cookies {
			if c.Name == sessionCookie {
				token = c.Value
			}
		}
		return nil
	})))
	require.NotEmpty(t, token, "the session cookie")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(button("Sign out")), state("link"),
		chromedp.Reload(), state("link"),
	), "Sign out, and after a reload")
	req, _ := http.NewRequest(http.MethodGet, base+"/stores/"+store+"/auth/me", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "GET me with the token of the session signed out")
}
