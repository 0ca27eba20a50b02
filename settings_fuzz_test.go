package main

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"deeplink/internal/config"
)

// FuzzGameAuthorizeURL checks the rules of a Game Authorize URL on any
// input (seeds in testdata/fuzz/FuzzGameAuthorizeURL): no panic, and what
// is accepted is at most 2048 characters, parses, has no userinfo and no
// fragment, has none of the forbidden schemes, is https (or http to
// localhost where allowed) with a host, or else of a custom scheme, with
// the warning.
func FuzzGameAuthorizeURL(f *testing.F) {
	for _, s := range []string{"https://game.example.com/oauth/authorize", "mygame://authorize", "javascript:alert(1)", "http://localhost:9000/a", "https://[::1]:8443/a"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, insecure bool) {
		s := &server{cfg: &Config{}}
		s.cfg.Webhooks.AllowInsecureURLs = insecure
		msg, warn := s.checkGameAuthorizeURL(v)
		if msg != "" {
			if warn != "" {
				t.Fatalf("checkGameAuthorizeURL(%q) = %q, %q; want no warning with a refusal", v, msg, warn)
			}
			return
		}
		u, err := url.Parse(v)
		switch {
		case err != nil:
			t.Fatalf("checkGameAuthorizeURL(%q) accepted it; url.Parse = %v", v, err)
		case utf8.RuneCountInString(v) > 2048:
			t.Fatalf("checkGameAuthorizeURL(%q) accepted %d characters", v, utf8.RuneCountInString(v))
		case u.User != nil || strings.Contains(v, "#"):
			t.Fatalf("checkGameAuthorizeURL(%q) accepted userinfo or a fragment", v)
		case config.ForbiddenScheme(u.Scheme):
			t.Fatalf("checkGameAuthorizeURL(%q) accepted the scheme %q", v, u.Scheme)
		case u.Scheme == "https" && u.Hostname() == "":
			t.Fatalf("checkGameAuthorizeURL(%q) accepted https without a host", v)
		case u.Scheme == "http" && (!insecure || u.Hostname() != "localhost" && u.Hostname() != "127.0.0.1"):
			t.Fatalf("checkGameAuthorizeURL(%q) accepted http (insecure URLs allowed: %v)", v, insecure)
		case (u.Scheme == "https" || u.Scheme == "http") != (warn == ""):
			t.Fatalf("checkGameAuthorizeURL(%q) warned %q", v, warn)
		}
	})
}
