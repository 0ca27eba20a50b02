package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// minimalStore is a store with only what API.md §2 requires of one.
const minimalStore = `{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": ["ak_test"]}`

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`{"stores": [` + minimalStore + `]}`))
	if err != nil {
		t.Fatalf("Parse(minimal) error: %v", err)
	}
	// The defaults are those API.md §2 shows.
	wantSchedule := []time.Duration{5 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute,
		2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, "127.0.0.1:8080"},
		{"data_dir", cfg.DataDir, "data"},
		{"public_base_url", cfg.PublicBaseURL, ""}, // until PublicBase
		{"auth_code_ttl", cfg.AuthCodeTTL.D(), 5 * time.Minute},
		{"session_ttl", cfg.SessionTTL.D(), 24 * time.Hour},
		{"webhooks.timeout", cfg.Webhooks.Timeout.D(), 10 * time.Second},
		{"webhooks.retry_schedule", durations(cfg.Webhooks.RetrySchedule), fmt.Sprint(wantSchedule)},
		{"webhooks.secret_rotation_grace", cfg.Webhooks.SecretRotationGrace.D(), 24 * time.Hour},
		{"webhooks.allow_insecure_urls", cfg.Webhooks.AllowInsecureURLs, false},
		{"webhooks.trusted_ca_file", cfg.Webhooks.TrustedCAFile, ""},
		{"webhooks.disable_after", cfg.Webhooks.DisableAfter.D(), 120 * time.Hour},
		{"webhooks.workers", cfg.Webhooks.Workers, 0},
		{"stores", len(cfg.Stores), 1},
		{"trusted_proxies", fmt.Sprint(cfg.proxies), "[]"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("Parse(minimal).%s = %v; want %v", c.name, c.got, c.want)
		}
	}
}

// TestPublicBase: a configuration without public_base_url gets one made
// of the address listened on when that is a loopback address, and none
// otherwise; one it sets stands.
func TestPublicBase(t *testing.T) {
	for _, tt := range []struct {
		set, listen, addr, want string
	}{
		{"", "", "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"", "", "127.0.0.2:9000", "http://127.0.0.2:9000"},
		{"", "", "[::1]:8080", "http://[::1]:8080"},
		{"", "", "localhost:8080", "http://localhost:8080"},
		{"", "", "0.0.0.0:8080", ""},
		{"", "", "[::]:8080", ""},
		{"", "", "10.1.2.3:8080", ""},
		{"", "", "shop.example.com:443", ""},
		{"https://auth.example.com", "localhost:8080", "127.0.0.1:8080", "https://auth.example.com"},
		// listen names the host localhost: the URL keeps the name, with
		// the port listened on.
		{"", "localhost:8080", "127.0.0.1:8080", "http://localhost:8080"},
		{"", "localhost:0", "127.0.0.1:41234", "http://localhost:41234"},
		{"", "127.0.0.1:0", "127.0.0.1:41234", "http://127.0.0.1:41234"},
		{"", "LOCALHOST:8080", "127.0.0.1:8080", "http://LOCALHOST:8080"},
		{"", "ip6-localhost:8080", "[::1]:8080", "http://ip6-localhost:8080"},
		{"", "shop.example.com:8080", "10.1.2.3:8080", ""},
	} {
		c := &Config{PublicBaseURL: tt.set, Listen: tt.listen}
		c.PublicBase(tt.addr)
		if c.PublicBaseURL != tt.want {
			t.Errorf("Config{PublicBaseURL: %q, Listen: %q}.PublicBase(%q): public_base_url = %q; want %q", tt.set, tt.listen, tt.addr, c.PublicBaseURL, tt.want)
		}
	}
}

// TestParseTrustedProxies checks how trusted_proxies entries are
// read: addresses as single-address prefixes, prefixes masked, and
// IPv4-mapped ones unmapped, as peers are compared unmapped.
func TestParseTrustedProxies(t *testing.T) {
	cfg, err := Parse([]byte(`{"trusted_proxies": ["10.1.2.3", "192.168.7.9/16", "2001:db8::1", "::ffff:10.0.0.1", "::ffff:172.16.0.0/108"], "stores": [` + minimalStore + `]}`))
	require.NoError(t, err)
	if got, want := fmt.Sprint(cfg.proxies), "[10.1.2.3/32 192.168.0.0/16 2001:db8::1/128 10.0.0.1/32 172.16.0.0/12]"; got != want {
		t.Errorf("proxies = %s; want %s", got, want)
	}
}

func durations(ds []Duration) string {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.D()
	}
	return fmt.Sprint(out)
}

func TestParseValues(t *testing.T) {
	// The example of API.md §2, with real values where it elides them.
	in := `{
  "listen": "0.0.0.0:9090",
  "data_dir": "/var/lib/deeplink",
  "public_base_url": "https://shop.example.com/",
  "auth_code_ttl": "2m",
  "session_ttl": "1h30m",
  "webhooks": {
    "timeout": "3s",
    "retry_schedule": ["1s", "2s"],
    "secret_rotation_grace": "0s",
    "allow_insecure_urls": true,
    "trusted_ca_file": "",
    "disable_after": "0s",
    "workers": 8
  },
  "stores": [
    {
      "id": "7C9E6679-7425-40DE-944B-E07FC1F90AE7",
      "name": "Acme",
      "api_keys": ["ak_live_1"],
      "api_key_sha256": ["` + strings.Repeat("ab", 32) + `"],
      "redirect_domains": ["shop.example.com", "*.acme.example.com"],
      "game_authorize_url": "https://game.example.com/oauth/authorize"
    }
  ],
  "apps": {
    "apple": [{"app_id": "TEAMID.com.example.game", "paths": ["/oauth/authorize"]}],
    "android": [{"package_name": "com.example.game", "sha256_cert_fingerprints": ["AB:CD"]}]
  }
}`
	cfg, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse(API.md example) error: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, "0.0.0.0:9090"},
		{"data_dir", cfg.DataDir, "/var/lib/deeplink"},
		{"auth_code_ttl", cfg.AuthCodeTTL.D(), 2 * time.Minute},
		{"session_ttl", cfg.SessionTTL.D(), 90 * time.Minute},
		{"webhooks.timeout", cfg.Webhooks.Timeout.D(), 3 * time.Second},
		{"webhooks.retry_schedule", durations(cfg.Webhooks.RetrySchedule), fmt.Sprint([]time.Duration{time.Second, 2 * time.Second})},
		{"webhooks.secret_rotation_grace", cfg.Webhooks.SecretRotationGrace.D(), time.Duration(0)},
		{"webhooks.allow_insecure_urls", cfg.Webhooks.AllowInsecureURLs, true},
		{"webhooks.disable_after", cfg.Webhooks.DisableAfter.D(), time.Duration(0)},
		{"webhooks.workers", cfg.Webhooks.Workers, 8},
		{"stores[0].name", cfg.Stores[0].Name, "Acme"},
		{"apps.apple", len(cfg.Apps.Apple), 1},
		{"apps.android", len(cfg.Apps.Android), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("Parse(API.md example).%s = %v; want %v", c.name, c.got, c.want)
		}
	}
}

// TestParseURLs: the URLs that a store's links and callbacks are
// made of, accepted in their good forms.
func TestParseURLs(t *testing.T) {
	for _, tt := range []struct{ base, game string }{
		{"https://shop.example.com", "https://game.example.com/oauth/authorize"},
		{"https://shop.example.com/signin/", "https://game.example.com/oauth/authorize?app=1"},
		{"http://127.0.0.1:8080", "mygame://authorize"}, // a custom scheme needs no host
		{"https://shop.example.com:8443", "mygame:authorize"},
	} {
		in := `{"public_base_url": "` + tt.base + `", "stores": [{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": ["ak_test"], "game_authorize_url": "` + tt.game + `"}]}`
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse(%s) = %v; want no error", in, err)
		}
	}
}

// TestParseErrors: every bad configuration is an error naming the bad
// field (API.md §1).
func TestParseErrors(t *testing.T) {
	// store returns a stores array of one store with the given members
	// replacing or adding to those of a valid store.
	store := func(members string) string {
		base := `"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": ["ak_test"]`
		if members != "" {
			base = members
		}
		return `"stores": [{` + base + `}]`
	}
	const id = `"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7"`
	const key = `"api_keys": ["ak_test"]`
	tests := []struct {
		name, in, field string
	}{
		{"not JSON", `stores`, "config"},
		{"not an object", `[]`, "config"},
		{"no stores", `{}`, "stores"},
		{"empty stores", `{"stores": []}`, "stores"},
		{"stores null", `{"stores": null}`, "stores"},
		{"store null", `{"stores": [null]}`, "stores[0]"},

		{"bad auth_code_ttl", `{"auth_code_ttl": "5 minutes", ` + store("") + `}`, "auth_code_ttl"},
		{"auth_code_ttl a number", `{"auth_code_ttl": 300, ` + store("") + `}`, "auth_code_ttl"},
		{"auth_code_ttl past year 2262", `{"auth_code_ttl": "2000000h", ` + store("") + `}`, "auth_code_ttl"},
		{"session_ttl past year 2262", `{"session_ttl": "2000000h", ` + store("") + `}`, "session_ttl"},
		{"auth_code_ttl zero", `{"auth_code_ttl": "0s", ` + store("") + `}`, "auth_code_ttl"},
		{"auth_code_ttl negative", `{"auth_code_ttl": "-1m", ` + store("") + `}`, "auth_code_ttl"},
		{"bad session_ttl", `{"session_ttl": "1 day", ` + store("") + `}`, "session_ttl"},
		{"session_ttl zero", `{"session_ttl": "0s", ` + store("") + `}`, "session_ttl"},
		{"bad webhooks.timeout", `{"webhooks": {"timeout": "soon"}, ` + store("") + `}`, "timeout"},
		{"webhooks.timeout zero", `{"webhooks": {"timeout": "0s"}, ` + store("") + `}`, "webhooks.timeout"},
		{"webhooks.timeout too long", `{"webhooks": {"timeout": "11m"}, ` + store("") + `}`, "webhooks.timeout"},
		{"bad retry_schedule entry", `{"webhooks": {"retry_schedule": ["5s", "later"]}, ` + store("") + `}`, "retry_schedule"},
		{"empty retry_schedule", `{"webhooks": {"retry_schedule": []}, ` + store("") + `}`, "retry_schedule"},
		{"retry_schedule past year 2262", `{"webhooks": {"retry_schedule": ["5s", "2500000h"]}, ` + store("") + `}`, "retry_schedule[1]"},
		{"bad secret_rotation_grace", `{"webhooks": {"secret_rotation_grace": "1d"}, ` + store("") + `}`, "secret_rotation_grace"},
		{"bad disable_after", `{"webhooks": {"disable_after": "5 days"}, ` + store("") + `}`, "webhooks.disable_after"},
		{"disable_after negative", `{"webhooks": {"disable_after": "-1h"}, ` + store("") + `}`, "webhooks.disable_after"},
		{"disable_after a number", `{"webhooks": {"disable_after": 3600}, ` + store("") + `}`, "webhooks.disable_after"},
		{"workers negative", `{"webhooks": {"workers": -1}, ` + store("") + `}`, "webhooks.workers"},
		{"workers over the cap", `{"webhooks": {"workers": 1025}, ` + store("") + `}`, "webhooks.workers"},
		{"workers a string", `{"webhooks": {"workers": "8"}, ` + store("") + `}`, "webhooks.workers"},
		{"missing trusted_ca_file", `{"webhooks": {"trusted_ca_file": "/nonexistent/ca.pem"}, ` + store("") + `}`, "trusted_ca_file"},
		{"allow_insecure_urls a string", `{"webhooks": {"allow_insecure_urls": "yes"}, ` + store("") + `}`, "allow_insecure_urls"},
		{"trusted_proxies not an address", `{"trusted_proxies": ["10.0.0.0/8", "proxy.local"], ` + store("") + `}`, "trusted_proxies[1]"},
		{"trusted_proxies a bad prefix", `{"trusted_proxies": ["10.0.0.0/33"], ` + store("") + `}`, "trusted_proxies[0]"},
		{"trusted_proxies with a zone", `{"trusted_proxies": ["fe80::1%eth0"], ` + store("") + `}`, "trusted_proxies[0]"},
		{"trusted_proxies wider than IPv4-mapped", `{"trusted_proxies": ["::ffff:0:0/95"], ` + store("") + `}`, "trusted_proxies[0]"},

		{"unknown top-level field", `{"listn": "x", ` + store("") + `}`, "listn"},
		{"unknown webhooks field", `{"webhooks": {"retries": 3}, ` + store("") + `}`, "retries"},
		{"unknown store field", `{` + store(id+`, `+key+`, "api_key": "x"`) + `}`, "api_key"},
		{"listen empty", `{"listen": "", ` + store("") + `}`, "listen"},
		{"data_dir empty", `{"data_dir": "", ` + store("") + `}`, "data_dir"},
		{"public_base_url relative", `{"public_base_url": "shop.example.com", ` + store("") + `}`, "public_base_url"},
		{"public_base_url ftp", `{"public_base_url": "ftp://shop.example.com", ` + store("") + `}`, "public_base_url"},
		{"public_base_url empty fragment", `{"public_base_url": "https://shop.example.com/x#", ` + store("") + `}`, "public_base_url"},
		{"public_base_url empty query", `{"public_base_url": "https://shop.example.com/x?", ` + store("") + `}`, "public_base_url"},
		{"public_base_url userinfo", `{"public_base_url": "https://u:p@shop.example.com", ` + store("") + `}`, "public_base_url"},
		{"public_base_url no host name", `{"public_base_url": "https://:443", ` + store("") + `}`, "public_base_url"},

		{"store id not a UUID", `{` + store(`"id": "store-1", `+key) + `}`, "id"},
		{"store id missing", `{` + store(key) + `}`, "id"},
		{"store id with braces", `{` + store(`"id": "{7c9e6679-7425-40de-944b-e07fc1f90ae}", `+key) + `}`, "id"},
		{"duplicate store id", `{"stores": [{` + id + `, ` + key + `}, {` + id + `, ` + key + `}]}`, "id"},
		{"duplicate store id in capitals", `{"stores": [{` + id + `, ` + key + `}, {"id": "7C9E6679-7425-40DE-944B-E07FC1F90AE7", ` + key + `}]}`, "appears twice"},
		{"no keys", `{` + store(id) + `}`, "api_key"},
		{"empty key lists", `{` + store(id+`, "api_keys": [], "api_key_sha256": []`) + `}`, "api_key"},
		{"empty api key", `{` + store(id+`, "api_keys": [""]`) + `}`, "api_keys"},
		{"api_key_sha256 not hex", `{` + store(id+`, "api_key_sha256": ["`+strings.Repeat("zz", 32)+`"]`) + `}`, "api_key_sha256"},
		{"api_key_sha256 too short", `{` + store(id+`, "api_key_sha256": ["`+strings.Repeat("ab", 31)+`"]`) + `}`, "api_key_sha256"},
		{"api_key_sha256 too long", `{` + store(id+`, "api_key_sha256": ["`+strings.Repeat("ab", 33)+`"]`) + `}`, "api_key_sha256"},
		{"redirect domain a URL", `{` + store(id+`, `+key+`, "redirect_domains": ["https://shop.example.com"]`) + `}`, "redirect_domains"},
		{"redirect domain with path", `{` + store(id+`, `+key+`, "redirect_domains": ["shop.example.com/cb"]`) + `}`, "redirect_domains"},
		{"redirect domain bare star", `{` + store(id+`, `+key+`, "redirect_domains": ["*"]`) + `}`, "redirect_domains"},
		{"redirect domain double star", `{` + store(id+`, `+key+`, "redirect_domains": ["*.*.example.com"]`) + `}`, "redirect_domains"},
		{"redirect domain star inside", `{` + store(id+`, `+key+`, "redirect_domains": ["shop.*.com"]`) + `}`, "redirect_domains"},
		{"redirect domain trailing dot", `{` + store(id+`, `+key+`, "redirect_domains": ["shop.example.com."]`) + `}`, "redirect_domains"},
		{"redirect domain non-ASCII", `{` + store(id+`, `+key+`, "redirect_domains": ["shöp.example.com"]`) + `}`, "redirect_domains"},
		{"redirect domain with port", `{` + store(id+`, `+key+`, "redirect_domains": ["shop.example.com:443"]`) + `}`, "redirect_domains"},
		{"redirect domain empty", `{` + store(id+`, `+key+`, "redirect_domains": [""]`) + `}`, "redirect_domains"},
		{"game_authorize_url relative", `{` + store(id+`, `+key+`, "game_authorize_url": "/oauth/authorize"`) + `}`, "game_authorize_url"},
		{"game_authorize_url https without a host", `{` + store(id+`, `+key+`, "game_authorize_url": "https:"`) + `}`, "game_authorize_url"},
		{"game_authorize_url https empty host", `{` + store(id+`, `+key+`, "game_authorize_url": "https://"`) + `}`, "game_authorize_url"},
		{"game_authorize_url userinfo", `{` + store(id+`, `+key+`, "game_authorize_url": "https://u:p@game.example.com/a"`) + `}`, "game_authorize_url"},
		{"game_authorize_url javascript", `{` + store(id+`, `+key+`, "game_authorize_url": "javascript://x/%0aalert(1)"`) + `}`, "game_authorize_url"},
		{"game_authorize_url data", `{` + store(id+`, `+key+`, "game_authorize_url": "DATA:text/html,x"`) + `}`, "game_authorize_url"},
		{"apple app without app_id", `{"apps": {"apple": [{"paths": ["/"]}]}, ` + store("") + `}`, "app_id"},
		{"android app without package_name", `{"apps": {"android": [{}]}, ` + store("") + `}`, "package_name"},

		{"trailing data", `{` + store("") + `} {"listen": "x"}`, "config"},
		{"api key with a line break", `{` + store(id+`, "api_keys": ["ak_ok", "ak_a\nb"]`) + `}`, "api_keys[1]"},
		{"api key with a space at its end", `{` + store(id+`, "api_keys": ["ak_a "]`) + `}`, "api_keys[0]"},
		{"api key with DEL", `{` + store(id+`, "api_keys": ["ak_\u007f"]`) + `}`, "api_keys[0]"},
		{"public_base_url port out of range", `{"public_base_url": "https://shop.example.com:99999", ` + store("") + `}`, "public_base_url"},
		{"public_base_url port 0", `{"public_base_url": "https://shop.example.com:0", ` + store("") + `}`, "public_base_url"},

		{"storage.backend unknown", `{"storage": {"backend": "postgres"}, ` + store("") + `}`, "storage.backend"},
		{"storage.durability unknown", `{"storage": {"durability": "never"}, ` + store("") + `}`, "storage.durability"},
		{"redis_url http", `{"storage": {"backend": "redis", "redis_url": "http://127.0.0.1:6379"}, ` + store("") + `}`, "storage.redis_url"},
		{"redis_url empty", `{"storage": {"backend": "redis", "redis_url": ""}, ` + store("") + `}`, "storage.redis_url"},
		{"redis_url bad db", `{"storage": {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/zero"}, ` + store("") + `}`, "storage.redis_url"},
		{"redis_url two path segments", `{"storage": {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0/1"}, ` + store("") + `}`, "storage.redis_url"},
		{"redis_url unknown option", `{"storage": {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0?colour=red"}, ` + store("") + `}`, "storage.redis_url"},
		{"redis_prefix empty", `{"storage": {"backend": "redis", "redis_prefix": ""}, ` + store("") + `}`, "storage.redis_prefix"},
		{"redis_prefix with a space", `{"storage": {"backend": "redis", "redis_prefix": "deep link:"}, ` + store("") + `}`, "storage.redis_prefix"},
		{"redis_prefix not ASCII", `{"storage": {"backend": "redis", "redis_prefix": "dé:"}, ` + store("") + `}`, "storage.redis_prefix"},
		{"redis_prefix too long", `{"storage": {"backend": "redis", "redis_prefix": "` + strings.Repeat("p", 65) + `"}, ` + store("") + `}`, "storage.redis_prefix"},
		{"unknown storage field", `{"storage": {"redis_host": "x"}, ` + store("") + `}`, "redis_host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%s) = %+v, nil; want an error naming %q", tt.in, cfg, tt.field)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("Parse(%s) error = %q; want it to name %q", tt.in, err, tt.field)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Parse(%s) error = %q; want one line", tt.in, err)
			}
		})
	}
}

// TestParseStorage: the storage backends and the Redis URLs the client
// takes are accepted; the Redis fields are checked only for "redis".
func TestParseStorage(t *testing.T) {
	for _, tt := range []struct {
		storage           string
		backend, url, pfx string
	}{
		{`{}`, "embedded", "redis://127.0.0.1:6379/0", "deeplink:"},
		{`{"backend": "embedded", "redis_url": "not a URL", "redis_prefix": ""}`, "embedded", "not a URL", ""},
		{`{"backend": "redis"}`, "redis", "redis://127.0.0.1:6379/0", "deeplink:"},
		{`{"backend": "redis", "redis_url": "redis://:s3cret@redis.internal:6380/2", "redis_prefix": "studio-a:"}`, "redis", "redis://:s3cret@redis.internal:6380/2", "studio-a:"},
		{`{"backend": "redis", "redis_url": "rediss://user:pw@redis.example.com"}`, "redis", "rediss://user:pw@redis.example.com", "deeplink:"},
		{`{"backend": "redis", "redis_url": "unix:///run/redis/redis.sock?db=1"}`, "redis", "unix:///run/redis/redis.sock?db=1", "deeplink:"},
	} {
		in := `{"storage": ` + tt.storage + `, "stores": [` + minimalStore + `]}`
		cfg, err := Parse([]byte(in))
		if err != nil {
			t.Errorf("Parse(%s) = %v; want no error", in, err)
			continue
		}
		if got := [3]string{cfg.Storage.Backend, cfg.Storage.RedisURL, cfg.Storage.RedisPrefix}; got != [3]string{tt.backend, tt.url, tt.pfx} {
			t.Errorf("Parse(%s).storage = %q; want %q", in, got, [3]string{tt.backend, tt.url, tt.pfx})
		}
	}
}

// TestParseRedisURLPasswordNotInErrors: a redis_url that does not parse
// is not echoed, as its userinfo is a password.
func TestParseRedisURLPasswordNotInErrors(t *testing.T) {
	for _, u := range []string{
		"redis://:pw_secret_value@127.0.0.1:bad/0",
		"redis://:pw_secret_value@127.0.0.1:6379/zero",
		"http://:pw_secret_value@127.0.0.1:6379",
		"redis://:pw_secret_value@[::1/0",
	} {
		in := `{"storage": {"backend": "redis", "redis_url": "` + u + `"}, "stores": [` + minimalStore + `]}`
		_, err := Parse([]byte(in))
		if err == nil {
			t.Errorf("Parse(redis_url %q) = nil error; want one", u)
			continue
		}
		if strings.Contains(err.Error(), "pw_secret_value") {
			t.Errorf("Parse(redis_url %q) error = %q; want no password in it", u, err)
		}
	}
}

// TestParseErrorWording checks the errors that name no field, or a
// field of the wrong JSON type: said in JSON's words, not Go's.
func TestParseErrorWording(t *testing.T) {
	const whole = "config: the file must hold one JSON object"
	tests := []struct{ in, want string }{
		{``, whole},
		{`  `, whole},
		{`[]`, whole},
		{`"stores"`, whole},
		{`5`, whole},
		{`{"listen": 8080, "stores": [` + minimalStore + `]}`, "config: listen: must be a string"},
		{`{"stores": {}}`, "config: stores: must be an array"},
		{`{"stores": [5]}`, "config: stores: must be an object"},
		{`{"stores": [{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": "ak_test"}]}`, "config: stores.api_keys: must be an array"},
		{`{"webhooks": {"allow_insecure_urls": "yes"}, "stores": [` + minimalStore + `]}`, "config: webhooks.allow_insecure_urls: must be true or false"},
		{`{"max_live_entries": "many", "stores": [` + minimalStore + `]}`, "config: max_live_entries: must be a whole number"},
		// Where a person fixes it: the line and column.
		{"{\n  \"listen\": \"127.0.0.1:1\",,\n}", "config: line 2, column 27: invalid character ',' looking for beginning of object key string"},
		{"{\"stores\": [\n" + minimalStore + ",\n  {\"id\": \"x\", \"redirect_domain\": []}]}", `config: line 3, column 15: unknown field "redirect_domain"`},
		// A name known in one place and not in another: no place is given
		// rather than the wrong one.
		{"{\"webhooks\": {\"timeout\": \"10s\"},\n \"stores\": [{\"id\": \"x\", \"timeout\": \"5s\"}]}", `config: unknown field "timeout"`},
		// Cut short: where it ends.
		{"{\"stores\": [\n" + minimalStore, `config: line 2, column 71: the file ends inside its JSON object (cut short?)`},
		// A member given twice: encoding/json would keep the last, names
		// matched ignoring case.
		{"{\"listen\": \"127.0.0.1:1\",\n \"listen\": \"127.0.0.1:2\", \"stores\": [" + minimalStore + "]}", `config: line 2, column 2: listen is given twice (only the last would count)`},
		{"{\"listen\": \"127.0.0.1:1\", \"Listen\": \"127.0.0.1:2\", \"stores\": [" + minimalStore + "]}", `config: line 1, column 27: Listen is given twice (only the last would count)`},
		// 'ſ' folds to 's' for encoding/json as for strings.EqualFold.
		{"{\"stores\": [" + minimalStore + "], \"ſtores\": [" + minimalStore + "]}", `config: line 1, column 87: ſtores is given twice (only the last would count)`},
		{"{\"webhooks\": {\"timeout\": \"1s\", \"retry_schedule\": [\"1s\"],\n\t\"timeout\": \"2s\"}, \"stores\": [" + minimalStore + "]}", `config: line 2, column 2: webhooks.timeout is given twice (only the last would count)`},
		{"{\"stores\": [{\"id\": \"7c9e6679-7425-40de-944b-e07fc1f90ae7\", \"api_keys\": [\"ak_test\"], \"id\": \"x\"}]}", `config: line 1, column 85: stores[0].id is given twice (only the last would count)`},
		{"{\"stores\": [" + minimalStore + ", {\"id\": \"0b5e0c3e-1111-4000-8000-00000000000a\", \"api_keys\": [\"k\"], \"redirect_domains\": [\"a.example\"], \"API_keys\": []}]}", `config: line 1, column 187: stores[1].API_keys is given twice (only the last would count)`},
	}
	for _, tt := range tests {
		if _, err := Parse([]byte(tt.in)); err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) error = %v; want %q", tt.in, err, tt.want)
		}
	}
}

// TestParseByteOrderMark: a file some Windows editors save with a
// UTF-8 byte-order mark is read as without it.
func TestParseByteOrderMark(t *testing.T) {
	if _, err := Parse([]byte("\ufeff" + `{"stores": [` + minimalStore + `]}`)); err != nil {
		t.Errorf("Parse(BOM + a valid file): %v; want it read", err)
	}
}

// TestParseKeysWithBlanks: a space or a tab inside a key can travel
// in X-API-Key, so such a key is taken (only control characters and blanks
// at either end are refused).
func TestParseKeysWithBlanks(t *testing.T) {
	for _, k := range []string{`ak with spaces`, `ak\twith\ttabs`} {
		in := `{"stores": [{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": ["` + k + `"]}]}`
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("Parse with key %q: %v; want it taken", k, err)
		}
	}
}

func TestParseSecretsNotInErrors(t *testing.T) {
	// A bad field elsewhere must not echo the store's keys.
	in := `{"auth_code_ttl": "x", "stores": [{"id": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "api_keys": ["ak_secret_value"]}]}`
	_, err := Parse([]byte(in))
	if err == nil {
		t.Fatalf("Parse(%s) = nil error; want one", in)
	}
	if strings.Contains(err.Error(), "ak_secret_value") {
		t.Errorf("Parse error = %q; want no API key in it", err)
	}
}

// TestStoreIDCase checks that store ids are compared ignoring case: a
// store configured in capitals (as uuidgen on macOS prints them) is found
// under either spelling, and keeps its id as configured, which its codes
// and sessions are keyed by (state saved before ids were compared so).
func TestStoreIDCase(t *testing.T) {
	const upper = "7C9E6679-7425-40DE-944B-E07FC1F90AE7"
	cfg, err := Parse([]byte(`{"stores": [{"id": "` + upper + `", "api_keys": ["k"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{upper, strings.ToLower(upper), "7c9e6679-7425-40DE-944b-e07fc1f90ae7"} {
		if st := cfg.Store(id); st == nil || st.ID != upper {
			t.Errorf("store(%q) = %v; want the store %s, as configured", id, st, upper)
		}
	}
	if st := cfg.Store("6ba7b810-9dad-11d1-80b4-00c04fd430c8"); st != nil {
		t.Errorf("store(another id) = %v; want nil", st)
	}
}

// FuzzParse feeds arbitrary bytes to Parse (seeds, the demo's among them,
// in testdata): it never panics, its errors are one line, and a
// configuration it accepts has a store.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"stores": [` + minimalStore + `], "listen": "127.0.0.1:1", "LISTEN": "127.0.0.1:2"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if bytes.Contains(bytes.ToLower(b), []byte("trusted_ca_file")) {
			return // the one field read from the file system: not by a fuzzer
		}
		c, err := Parse(b)
		switch {
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Fatalf("Parse(%q) error = %q; want one line", b, err)
		case err == nil && len(c.Stores) == 0:
			t.Fatalf("Parse(%q) = a configuration without stores, nil", b)
		}
	})
}

// TestFoldKey: foldKey makes names equal exactly when strings.EqualFold
// says they are, as encoding/json matches them.
func TestFoldKey(t *testing.T) {
	names := []string{"stores", "Stores", "STORES", "ſtores", "listen", "LISTEN", "k", "K", "K", "é", "É", "e", "ss", "ß", "ẞ"}
	for _, a := range names {
		for _, b := range names {
			if got, want := foldKey(a) == foldKey(b), strings.EqualFold(a, b); got != want {
				t.Errorf("foldKey(%q) == foldKey(%q) is %v; want %v (strings.EqualFold)", a, b, got, want)
			}
		}
	}
}
