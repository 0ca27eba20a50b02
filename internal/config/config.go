// Package config reads the service's configuration file (docs/configuration.md): the
// service's, and the edge host's, which checks the file before it
// listens, as the native build does, rather than wait for its module.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Config is the configuration file of docs/configuration.md. Durations are Go duration
// strings in the file; Parse fills in every default.
type Config struct {
	Listen        string          `json:"listen"`
	DataDir       string          `json:"data_dir"`
	PublicBaseURL string          `json:"public_base_url"`
	AuthCodeTTL   Duration        `json:"auth_code_ttl"`
	SessionTTL    Duration        `json:"session_ttl"`
	Webhooks      WebhookConfig   `json:"webhooks"`
	Storage       StorageConfig   `json:"storage"`
	Dashboard     DashboardConfig `json:"dashboard"`
	Stores        []*StoreConfig  `json:"stores"`
	Apps          AppsConfig      `json:"apps"`

	// MaxLiveEntries caps the auth codes and sessions held in memory; writes
	// beyond it answer 503. A safety valve with a generous
	// default (about 1 GiB of heap at 2 M entries).
	MaxLiveEntries int `json:"max_live_entries"`

	// Fairness keeps one store or one key from taking what others need.
	Fairness FairnessConfig `json:"fairness"`

	// Shutdown says how the service stops.
	Shutdown ShutdownConfig `json:"shutdown"`

	// TrustedProxies are the addresses (or CIDR prefixes) of the proxies
	// in front of the service, whose X-Forwarded-For names the client
	// that the API-key guard counts failures for; none by
	// default, as a proxy that passes the header on as the client sent it
	// would let the client pick the address it is counted as.
	TrustedProxies []string `json:"trusted_proxies"`

	stores  map[string]*StoreConfig // by id in lower case, built by validate: look up with Store
	proxies []netip.Prefix          // TrustedProxies, parsed by validate
}

// WebhookConfig is the "webhooks" object of the configuration file.
type WebhookConfig struct {
	Timeout             Duration   `json:"timeout"`
	RetrySchedule       []Duration `json:"retry_schedule"`
	SecretRotationGrace Duration   `json:"secret_rotation_grace"`
	AllowInsecureURLs   bool       `json:"allow_insecure_urls"`
	TrustedCAFile       string     `json:"trusted_ca_file"`
	// DisableAfter disables an endpoint whose attempts have all failed
	// for this long (at least one failure, no success since the first of
	// them); 0 never does.
	DisableAfter Duration `json:"disable_after"`

	// DeliveryLogSize is how many deliveries the log keeps per endpoint,
	// newest first.
	DeliveryLogSize int `json:"delivery_log_size"`
	// Workers is how many delivery attempts one process makes at once,
	// up to MaxWebhookWorkers; 0 sizes the pool by the stores configured
	// (webhook.DispatchWorkers).
	Workers int `json:"workers"`
}

// MaxWebhookWorkers is the most webhooks.workers may say: the most
// webhook requests either build makes at once (egress.MaxInFlight).
const MaxWebhookWorkers = 1024

// StorageConfig is the "storage" object of the configuration file: where
// the state is kept, and when a change is acknowledged.
type StorageConfig struct {
	// Backend is "embedded": in memory, journaled to data_dir (one
	// process), or "redis": all state in one Redis, shared by any number
	// of processes (API.md §9); data_dir is then not used.
	Backend string `json:"backend"`
	// Durability is "fsync" (a 2xx once the change is fsynced) or
	// "interval" (written and fsynced within a second of the 2xx);
	// embedded only.
	Durability string `json:"durability"`
	// RedisURL is where the "redis" backend's Redis is; RedisPrefix
	// starts every key the service writes there, so that one Redis can
	// hold several deployments.
	RedisURL    string `json:"redis_url"`
	RedisPrefix string `json:"redis_prefix"`
}

// maxRedisPrefix bounds storage.redis_prefix: every key carries it.
const maxRedisPrefix = 64

// checkRedisPrefix reports what is wrong with p as storage.redis_prefix:
// it must not be empty, so that the service's keys stand apart from any
// other user's of the same database, and it is printable ASCII without
// spaces, so that it reads the same in redis-cli, a log and a KEYS
// pattern.
func checkRedisPrefix(p string) error {
	if p == "" {
		return errors.New(`must not be empty (the default is "deeplink:")`)
	}
	if len(p) > maxRedisPrefix {
		return fmt.Errorf("is %d bytes; at most %d", len(p), maxRedisPrefix)
	}
	for _, r := range p {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("%q: only printable ASCII, no spaces", p)
		}
	}
	return nil
}

// DashboardConfig is the "dashboard" object of the configuration file:
// the merchants' web interface at /dashboard.
type DashboardConfig struct {
	Enabled bool `json:"enabled"`
	// SessionTTL is how long a dashboard sign-in lasts.
	SessionTTL Duration `json:"session_ttl"`
}

// AppsConfig describes the game apps for the association files (docs/api.md).
type AppsConfig struct {
	Apple   []AppleApp   `json:"apple"`
	Android []AndroidApp `json:"android"`
}

type AppleApp struct {
	AppID string   `json:"app_id"`
	Paths []string `json:"paths"`
}

type AndroidApp struct {
	PackageName            string   `json:"package_name"`
	SHA256CertFingerprints []string `json:"sha256_cert_fingerprints"`
}

// Duration is a time.Duration written as a Go duration string ("5m").
type Duration time.Duration

// UnmarshalJSON fails with a *json.UnmarshalTypeError, the one error type
// encoding/json fills in the field path of, so Parse can name it.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: durationType}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeFor[Duration]()

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func defaultConfig() *Config {
	sched := []Duration{}
	for _, s := range []string{"5s", "1m", "5m", "30m", "2h", "6h", "12h", "24h"} {
		d, _ := time.ParseDuration(s)
		sched = append(sched, Duration(d))
	}
	return &Config{
		Listen:      "127.0.0.1:8080",
		DataDir:     "data",
		AuthCodeTTL: Duration(5 * time.Minute),
		SessionTTL:  Duration(24 * time.Hour),
		Webhooks: WebhookConfig{
			Timeout:             Duration(10 * time.Second),
			RetrySchedule:       sched,
			SecretRotationGrace: Duration(24 * time.Hour),
			DisableAfter:        Duration(120 * time.Hour),
			DeliveryLogSize:     1000,
		},
		Storage: StorageConfig{
			Backend:     "embedded",
			Durability:  "fsync",
			RedisURL:    "redis://127.0.0.1:6379/0",
			RedisPrefix: "deeplink:",
		},
		Dashboard:      DashboardConfig{Enabled: true, SessionTTL: Duration(8 * time.Hour)},
		MaxLiveEntries: 2_000_000,
		Fairness:       FairnessConfig{KeyRate: 1000, KeyBurst: 10_000},
	}
}

// Parse parses and validates a configuration file's contents. Its error
// is one line, naming the bad field.
func Parse(b []byte) (*Config, error) {
	c := defaultConfig()
	b = bytes.TrimPrefix(b, []byte("\ufeff")) // a byte-order mark, as some Windows editors write
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("config: %s: %v", where(b, int(se.Offset)), se)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) { // cut short: a copy, an editor's save
			return nil, fmt.Errorf("config: %s: the file ends inside its JSON object (cut short?)", where(b, len(b)+1))
		}
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg := "unknown field " + field
			if i := bytes.Index(b, []byte(field)); i >= 0 && bytes.Count(b, []byte(field)) == 1 {
				msg = where(b, i+1) + ": " + msg // the name's only use: the one meant
			}
			return nil, errors.New("config: " + msg)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Type == durationType {
			return nil, fmt.Errorf("config: %s: %s is not a duration such as \"5m\"", te.Field, te.Value)
		}
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("config: %s: must be %s", te.Field, jsonKind(te.Type))
		}
		if te != nil || err == io.EOF { // the whole file is of the wrong type, or empty
			return nil, errors.New("config: the file must hold one JSON object")
		}
		return nil, fmt.Errorf("config: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("config: the file holds more than one JSON value")
	}
	if name, off, ok := repeatedMember(b); ok {
		return nil, fmt.Errorf("config: %s: %s is given twice (only the last would count)", where(b, off), name)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// repeatedMember finds a member name given twice in one object of b, one
// JSON value, and returns its path (webhooks.timeout, stores[1].id) and
// the byte offset (counted from 1) of its second use. encoding/json keeps the last and matches names ignoring
// case (foldKey), so names are compared so too: an edit appended below an
// old setting, or a stray "Listen", would otherwise win, or lose, unseen.
func repeatedMember(b []byte) (name string, off int, ok bool) {
	type frame struct {
		path  string          // of the object or array, "" for the file's
		names map[string]bool // nil in an array
		key   bool            // an object's next string is a name
		name  string          // an object's member being read
		index int             // an array's element being read
	}
	var stack []frame
	// child is the path of the value being read in the innermost container.
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.names == nil {
			return fmt.Sprintf("%s[%d]", f.path, f.index)
		}
		if f.path == "" {
			return f.name
		}
		return f.path + "." + f.name
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return "", 0, false // io.EOF, or an error Decode reported already
		}
		top := len(stack) - 1
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{path: child(), names: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{path: child()})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		default:
			if top >= 0 && stack[top].names != nil && stack[top].key {
				stack[top].name = tok.(string)
				n := foldKey(stack[top].name)
				if stack[top].names[n] {
					// start is where the name's token began, or the
					// separator before it.
					i := bytes.IndexByte(b[start:], '"')
					return child(), start + i + 1, true
				}
				stack[top].names[n] = true
				stack[top].key = false
				continue
			}
		}
		switch top = len(stack) - 1; {
		case top < 0:
		case stack[top].names != nil:
			stack[top].key = true // a value ended: a name comes next
		default:
			stack[top].index++
		}
	}
}

// foldKey returns a key equal for two names exactly when
// strings.EqualFold holds between them, which is how encoding/json
// matches a member to a field: each rune becomes the least of its
// simple case folding orbit ('ſ' and 's' both 'S', 'K' (Kelvin) 'K').
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// where names the place of byte offset off (counted from 1) in b as
// "line L, column C", for errors a person fixes in an editor.
func where(b []byte, off int) string {
	off = max(min(off, len(b)), 1) // b[:off-1] then holds even for an empty b
	line := 1 + bytes.Count(b[:off-1], []byte("\n"))
	col := off - bytes.LastIndexByte(b[:off-1], '\n') - 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

// jsonKind names what a value of Go type t is in JSON, for errors.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// maxWebhookTimeout bounds webhooks.timeout.
const maxWebhookTimeout = 10 * time.Minute

func (c *Config) validate() error {
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		return fmt.Errorf("listen: %q is not HOST:PORT", c.Listen)
	}
	if c.DataDir == "" {
		return errors.New("data_dir: must not be empty")
	}
	// The callback URL is this with a path added, and must pass the
	// service's own redirect_uri rules: no userinfo, a host name, nothing
	// after a ? or a # (which would swallow the path added).
	// Left out, it is "" until the listen address is final (PublicBase).
	if c.PublicBaseURL != "" {
		u, err := url.Parse(c.PublicBaseURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil || strings.ContainsAny(c.PublicBaseURL, "?#") {
			return fmt.Errorf("public_base_url: %q must be an absolute http(s) URL with a host, and no userinfo, query or fragment", c.PublicBaseURL)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("public_base_url: port %s must be 1 to 65535", p)
			}
		}
		c.PublicBaseURL = strings.TrimSuffix(c.PublicBaseURL, "/")
	}
	// Expiry times are unix nanoseconds, which end in 2262: a bound far
	// below that keeps them from wrapping.
	const maxTTL = 10 * 365 * 24 * time.Hour
	if c.AuthCodeTTL <= 0 || c.AuthCodeTTL.D() > maxTTL {
		return errors.New("auth_code_ttl: must be positive and at most 10 years")
	}
	if c.SessionTTL <= 0 || c.SessionTTL.D() > maxTTL {
		return errors.New("session_ttl: must be positive and at most 10 years")
	}
	if c.Dashboard.SessionTTL <= 0 || c.Dashboard.SessionTTL.D() > maxTTL {
		return errors.New("dashboard.session_ttl: must be positive and at most 10 years")
	}
	if c.MaxLiveEntries <= 0 {
		return errors.New("max_live_entries: must be positive")
	}
	if err := c.Fairness.validate(); err != nil {
		return err
	}
	if err := c.Shutdown.validate(); err != nil {
		return err
	}
	switch c.Storage.Backend {
	case "embedded":
	case "redis":
		if err := checkRedisURL(c.Storage.RedisURL); err != nil {
			return fmt.Errorf("storage.redis_url: %v (want redis://[[user]:password@]host:port/db, rediss:// for TLS, or unix:///path?db=N)", err)
		}
		if err := checkRedisPrefix(c.Storage.RedisPrefix); err != nil {
			return fmt.Errorf("storage.redis_prefix: %v", err)
		}
	default:
		return fmt.Errorf(`storage.backend: %q must be "embedded" or "redis"`, c.Storage.Backend)
	}
	if d := c.Storage.Durability; d != "fsync" && d != "interval" {
		return fmt.Errorf(`storage.durability: %q must be "fsync" or "interval"`, d)
	}
	c.proxies = c.proxies[:0]
	for i, p := range c.TrustedProxies {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			addr, aerr := netip.ParseAddr(p)
			if aerr != nil || addr.Zone() != "" {
				return fmt.Errorf("trusted_proxies[%d]: %q is neither an IP address nor a CIDR prefix", i, p)
			}
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		if prefix.Addr().Is4In6() {
			// Peers are compared unmapped: ::ffff:10.0.0.1 is 10.0.0.1.
			bits := prefix.Bits() - 96
			if bits < 0 {
				return fmt.Errorf("trusted_proxies[%d]: %q is wider than the IPv4-mapped range", i, p)
			}
			prefix = netip.PrefixFrom(prefix.Addr().Unmap(), bits)
		}
		c.proxies = append(c.proxies, prefix.Masked())
	}
	// An attempt holds one of the delivery workers for as long: minutes
	// are already far beyond what a receiver should take to answer.
	if c.Webhooks.Timeout <= 0 || c.Webhooks.Timeout.D() > maxWebhookTimeout {
		return fmt.Errorf("webhooks.timeout: must be positive and at most %v", maxWebhookTimeout)
	}
	if len(c.Webhooks.RetrySchedule) == 0 {
		return errors.New("webhooks.retry_schedule: must not be empty")
	}
	for i, d := range c.Webhooks.RetrySchedule {
		if d <= 0 || d.D() > maxTTL {
			return fmt.Errorf("webhooks.retry_schedule[%d]: must be positive and at most 10 years", i)
		}
	}
	if c.Webhooks.DeliveryLogSize < 1 {
		return errors.New("webhooks.delivery_log_size: must be at least 1")
	}
	if c.Webhooks.SecretRotationGrace < 0 {
		return errors.New("webhooks.secret_rotation_grace: must not be negative")
	}
	if w := c.Webhooks.Workers; w < 0 || w > MaxWebhookWorkers {
		return fmt.Errorf("webhooks.workers: must be 0 (sized by the stores configured) or 1 to %d", MaxWebhookWorkers)
	}
	if c.Webhooks.DisableAfter < 0 {
		return errors.New(`webhooks.disable_after: must not be negative ("0s" turns it off)`)
	}
	if f := c.Webhooks.TrustedCAFile; f != "" {
		if err := checkTrustedCAFile(f); err != nil {
			return fmt.Errorf("webhooks.trusted_ca_file: %v", err)
		}
	}
	if len(c.Stores) == 0 {
		return errors.New("stores: at least one store is required")
	}
	c.stores = make(map[string]*StoreConfig, len(c.Stores))
	for i, s := range c.Stores {
		if err := s.validate(); err != nil {
			return fmt.Errorf("stores[%d].%w", i, err)
		}
		key := strings.ToLower(s.ID) // see store
		if _, dup := c.stores[key]; dup {
			return fmt.Errorf("stores[%d].id: %q appears twice (ids are compared ignoring case)", i, s.ID)
		}
		c.stores[key] = s
	}
	for i, a := range c.Apps.Apple {
		if a.AppID == "" {
			return fmt.Errorf("apps.apple[%d].app_id: must not be empty", i)
		}
	}
	for i, a := range c.Apps.Android {
		if a.PackageName == "" {
			return fmt.Errorf("apps.android[%d].package_name: must not be empty", i)
		}
	}
	return nil
}

// Proxies returns trusted_proxies, parsed: IPv4-mapped prefixes unmapped,
// each masked.
func (c *Config) Proxies() []netip.Prefix { return c.proxies }

// SetProxies replaces what Proxies returns: for tests.
func (c *Config) SetProxies(p []netip.Prefix) { c.proxies = p }

// PublicBase fills in public_base_url when the configuration leaves it
// out and the service listens on a loopback address, addr (HOST:PORT as
// listened on), for use on this machine: http:// and listen, by the name
// it gives the host, as written (localhost stays localhost, which the
// browser's cookies and the redirect domains go by), and the port
// listened on.
// Elsewhere it stays "", and the browser flow is off until it is set:
// only the operator knows the name browsers reach the service by.
func (c *Config) PublicBase(addr string) {
	if c.PublicBaseURL != "" {
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	if ip, err := netip.ParseAddr(host); host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return
	}
	if named, _, err := net.SplitHostPort(c.Listen); err == nil && named != "" {
		if _, err := netip.ParseAddr(named); err != nil { // a name, not an address
			host = named
		}
	}
	c.PublicBaseURL = "http://" + net.JoinHostPort(host, port)
}
