// Package egress makes the service's outgoing webhook requests: one HTTP
// client with the rules of docs/api.md (timeout, no redirects, no proxy,
// every dialled address checked), one POST that reads at most 4 KiB of
// the answer, and GetFiles for the association check. The native service
// and the wasm host both use it, so the rules cannot drift apart.
package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// MaxResponseBody is how much of a receiver's answer is read and kept.
const MaxResponseBody = 4 << 10

// MaxResponseHeader bounds the header of a receiver's answer: past it the
// attempt fails. net/http's own bound is 10 MiB, which a receiver could
// send to every one of up to 1024 attempts under way at once.
const MaxResponseHeader = 64 << 10

// MaxInFlight is the most webhook requests either build makes at once:
// the native sender's largest pool and the edge host's cap. With at
// most 4 in flight per endpoint and 5 endpoints per store, it leaves
// room for every endpoint of 51 stores to be slow at once.
const MaxInFlight = 1024

// Options configure NewClient.
type Options struct {
	Timeout             time.Duration // the whole exchange, body included
	AllowPrivate        bool          // allow_insecure_urls: skip the address check
	TrustedCAFile       string        // extra PEM roots, "" for none
	MaxIdleConnsPerHost int           // kept-alive connections per host
}

// NewClient returns the client deliveries use: the timeout for the whole
// exchange, no redirects followed, no proxy from the environment (it would
// bypass the address check), kept-alive connections, extra trusted roots,
// and, unless AllowPrivate, a check of every address actually dialled.
func NewClient(o Options) (*http.Client, error) {
	// Without extra roots, RootCAs stays nil: TLS reads the system's
	// roots at the first handshake, not at a launch (50 ms here).
	var roots *x509.CertPool
	if o.TrustedCAFile != "" {
		var err error
		if roots, err = x509.SystemCertPool(); err != nil {
			roots = x509.NewCertPool()
		}
		pem, err := os.ReadFile(o.TrustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("webhooks.trusted_ca_file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("webhooks.trusted_ca_file: %s holds no PEM certificate", o.TrustedCAFile)
		}
	}
	dialer := &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}
	if !o.AllowPrivate {
		dialer.Control = refuseNonPublic
	}
	return &http.Client{
		Timeout: o.Timeout,
		Transport: &http.Transport{
			DialContext:            dialer.DialContext,
			TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    o.Timeout,
			ResponseHeaderTimeout:  o.Timeout,
			MaxResponseHeaderBytes: MaxResponseHeader,
			MaxIdleConnsPerHost:    max(o.MaxIdleConnsPerHost, 1),
			IdleConnTimeout:        90 * time.Second,
			ForceAttemptHTTP2:      true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

// Result is the outcome of one Post.
type Result struct {
	Status   int           // 0 when no answer came
	Body     []byte        // the first MaxResponseBody bytes of the answer
	Duration time.Duration // from the start to the body read
	Err      error         // no answer, or the body could not be read
	Timeout  bool          // Err is a timeout
}

// Post sends body to url with header through c. A huge or never-ending
// answer costs at most the client's timeout, MaxResponseHeader bytes of
// header and MaxResponseBody bytes of body.
func Post(ctx context.Context, c *http.Client, url string, header http.Header, body []byte) Result {
	start := time.Now()
	// A *bytes.Reader body lets net/http send the headers and the body in
	// one write; any other reader makes it flush the headers first, a
	// second write (and packet) per request.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Result{Err: err}
	}
	// Without GetBody the transport never sends the body a second time
	// on its own: every request is one recorded attempt.
	req.GetBody = nil
	req.Header = header
	resp, err := c.Do(req)
	if err != nil {
		var te interface{ Timeout() bool }
		return Result{Err: shown(err, req), Duration: time.Since(start), Timeout: errors.As(err, &te) && te.Timeout()}
	}
	r := Result{Status: resp.StatusCode}
	r.Body, r.Err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
	resp.Body.Close() // never read past the limit: closing drops the connection instead
	r.Duration = time.Since(start)
	return r
}

// File is a file a merchant serves, as GetFiles fetched it: what a check
// reads of it, and no more (the edge host hands it to the module).
type File struct {
	Status      int    `json:"status"`             // 0 when no answer came
	ContentType string `json:"content_type"`       // the answer's, cut to maxFileHeader bytes
	Location    string `json:"location,omitempty"` // a redirect's, cut to maxFileHeader bytes
	Body        []byte `json:"body,omitempty"`     // at most the limit GetFiles was given
	Err         string `json:"err,omitempty"`      // no answer, or the body could not be read
}

// maxFileHeader bounds what File keeps of a header: enough to show.
const maxFileHeader = 1 << 10

// GetFiles fetches each of urls through c, all at once, and reads at most
// limit bytes of each answer: for checks of files a merchant serves (the
// association files), under the same rules as deliveries. The files are
// in the order of urls.
func GetFiles(ctx context.Context, c *http.Client, urls []string, limit int64) []File {
	files := make([]File, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { files[i] = getFile(ctx, c, u, limit) })
	}
	wg.Wait()
	return files
}

func getFile(ctx context.Context, c *http.Client, url string, limit int64) File {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return File{Err: err.Error()}
	}
	resp, err := c.Do(req)
	if err != nil {
		return File{Err: shown(err, req).Error()}
	}
	defer resp.Body.Close()
	f := File{Status: resp.StatusCode, ContentType: cut(resp.Header.Get("Content-Type")), Location: cut(resp.Header.Get("Location"))}
	if f.Body, err = io.ReadAll(io.LimitReader(resp.Body, limit)); err != nil {
		f.Err = err.Error()
	}
	return f
}

// cut returns s up to maxFileHeader bytes, cut before a character.
func cut(s string) string {
	if len(s) <= maxFileHeader {
		return s
	}
	i := maxFileHeader
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// ErrNotPublic is why a request to an address that is not public is
// refused while allow_insecure_urls is off.
var ErrNotPublic = errors.New("refusing to connect: its address is not a public one (allow_insecure_urls is off)")

// refuseNonPublic is a net.Dialer Control: it refuses to connect to an
// address that is not public, whatever name resolved to it.
func refuseNonPublic(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	if !IsPublicAddr(ip) {
		return ErrNotPublic
	}
	return nil
}

// shown is err, the error of req, as a merchant may read it (in the
// delivery log, on the dashboard): a refused address is not named, as
// what a name resolves to inside the service's network is not theirs to
// learn.
func shown(err error, req *http.Request) error {
	if errors.Is(err, ErrNotPublic) {
		return fmt.Errorf("%s %q: %w", req.Method, req.URL.Redacted(), ErrNotPublic)
	}
	return err
}

// nonPublic are ranges the netip predicates do not cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 may reach private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4 embeds any IPv4
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// IsPublicAddr reports whether ip is a public unicast address: not
// loopback, private (RFC 1918, RFC 4193), link-local, CGNAT, multicast,
// unspecified, reserved, nor an IPv4-mapped form of those.
func IsPublicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}
