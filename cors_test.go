package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestMeCORS: a webshop page on one of the store's redirect domains may
// read /auth/me from the browser with a Bearer token (the preflight, then
// the request, 401s included); a page anywhere else gets no CORS header,
// so its browser keeps the answer from it.
func TestMeCORS(t *testing.T) {
	_, ts := startService(t, cfgOpts{})
	r := mustRegister(t, ts, storeA, keyA)
	tok := requireToken(t, postForm(t, tokenURL(ts, storeA), r.form()))
	bearer := "Bearer " + tok.AccessToken

	tests := []struct {
		name, store, origin string
		allow               bool
	}{
		{"redirect domain", storeA, "https://shop.example.com", true},
		{"redirect domain with a port", storeA, "https://shop.example.com:8443", true},
		{"wildcard redirect domain", storeA, "https://a.acme.example.com", true},
		{"foreign origin", storeA, "https://evil.example.com", false},
		{"the wildcard's parent", storeA, "https://acme.example.com", false},
		{"suffix of a foreign host", storeA, "https://shop.example.com.evil.com", false},
		{"plain http", storeA, "http://shop.example.com", false},
		{"opaque origin", storeA, "null", false},
		{"userinfo", storeA, "https://evil@shop.example.com", false},
		{"a path", storeA, "https://shop.example.com/", false},
		{"another store's domain", storeB, "https://a.acme.example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := meURL(ts, tt.store)
			pre := call(t, http.MethodOptions, u, nil,
				"Origin", tt.origin, "Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization")
			// The token is store A's: the GET is 200 there and 401 at
			// store B; either way the page may read it only when allowed.
			wantGet := http.StatusOK
			if tt.store != storeA {
				wantGet = http.StatusUnauthorized
			}
			get := call(t, http.MethodGet, u, nil, "Origin", tt.origin, "Authorization", bearer)
			bad := call(t, http.MethodGet, u, nil, "Origin", tt.origin, "Authorization", "Bearer not-a-token")
			for _, c := range []struct {
				what   string
				got    response
				status int
			}{
				{"OPTIONS", pre, map[bool]int{true: http.StatusNoContent, false: http.StatusForbidden}[tt.allow]},
				{"GET", get, wantGet},
				{"GET with an unknown token", bad, http.StatusUnauthorized},
			} {
				h := c.got.header
				if c.got.status != c.status {
					t.Errorf("%s %s from %q = %d; want %d", c.what, tt.store, tt.origin, c.got.status, c.status)
				}
				want := ""
				if tt.allow {
					want = tt.origin
				}
				if got := h.Get("Access-Control-Allow-Origin"); got != want {
					t.Errorf("%s from %q: Access-Control-Allow-Origin = %q; want %q", c.what, tt.origin, got, want)
				}
				if !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
					t.Errorf("%s from %q: Vary = %q; want Origin in it", c.what, tt.origin, h.Values("Vary"))
				}
				if !tt.allow && (h.Get("Access-Control-Allow-Headers") != "" || h.Get("Access-Control-Allow-Methods") != "") {
					t.Errorf("%s from %q: Access-Control-Allow-Headers %q, -Methods %q; want none", c.what, tt.origin,
						h.Get("Access-Control-Allow-Headers"), h.Get("Access-Control-Allow-Methods"))
				}
			}
			if tt.allow {
				if got := strings.ToLower(pre.header.Get("Access-Control-Allow-Headers")); !strings.Contains(got, "authorization") {
					t.Errorf("preflight from %q: Access-Control-Allow-Headers = %q; want Authorization", tt.origin, got)
				}
				if got := pre.header.Get("Access-Control-Allow-Methods"); !strings.Contains(got, "GET") {
					t.Errorf("preflight from %q: Access-Control-Allow-Methods = %q; want GET", tt.origin, got)
				}
			}
		})
	}

	for _, tt := range []struct {
		name, method, path string
		headers            []string
		want               int
	}{
		{"preflight for an unknown store", http.MethodOptions, "/stores/00000000-0000-4000-8000-000000000000/auth/me",
			[]string{"Origin", "https://shop.example.com", "Access-Control-Request-Method", "GET"}, http.StatusNotFound},
		{"no Origin: no CORS header", http.MethodGet, "/stores/" + storeA + "/auth/me", []string{"Authorization", bearer}, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := call(t, tt.method, ts.URL+tt.path, nil, tt.headers...)
			if got.status != tt.want || got.header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s %s = %d, Access-Control-Allow-Origin %q; want %d and none", tt.method, tt.path, got.status, got.header.Get("Access-Control-Allow-Origin"), tt.want)
			}
		})
	}
}
