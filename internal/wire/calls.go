package wire

import (
	"net/url"
	"strings"
)

// The arguments of the module's start export and of deeplink_host.fetch,
// and their results, passed as JSON (they are rare next to handle).

// StartArgs is the argument of start.
type StartArgs struct {
	Config  []byte `json:"config"`   // the configuration file's bytes; empty for the demo
	BaseURL string `json:"base_url"` // the public_base_url the host gives: the demo's own address, or one made from where it listens
	// Worker: an instance that serves only the requests Primary does not
	// send to the primary.
	Worker bool `json:"worker,omitempty"`
	// UserAgent is the User-Agent of the webhook requests the host's
	// sender sends, which the delivery log shows.
	UserAgent string `json:"user_agent,omitempty"`
}

// RoutePath is the path net/http's ServeMux matches routes against of
// escaped, a request's escaped path: each segment unescaped. (A segment
// holding an escaped "/" is left as it is: no route has one in a literal
// segment.) The edge host routes on it, so that "/stores/s/%77ebhooks",
// which the module's mux serves as the webhooks route, goes where that
// route goes.
func RoutePath(escaped string) string {
	if !strings.Contains(escaped, "%") {
		return escaped // nothing to unescape: no copy
	}
	segs := strings.Split(escaped, "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil && !strings.Contains(u, "/") {
			segs[i] = u
		}
	}
	return strings.Join(segs, "/")
}

// Primary reports whether a request for path (its RoutePath) goes to the
// edge host's primary instance: the edgefault build's test routes, which
// fault the instance they run on. Any instance serves the others.
func Primary(path string) bool { return strings.HasPrefix(path, "/__fault/") }

// Queues reports whether a change for path (its RoutePath) may queue
// webhook deliveries (a publish, a test call, a retry, recover, or their
// dashboard pages): the edge host has its sender look at the queue at
// once after one.
func Queues(path string) bool {
	if strings.HasPrefix(path, "/dashboard/webhooks/") {
		return true
	}
	rest, ok := strings.CutPrefix(path, "/stores/")
	if !ok {
		return false
	}
	_, rest, _ = strings.Cut(rest, "/")
	return strings.HasPrefix(rest, "webhooks/") || rest == "events"
}

// Waits reports whether a request for path (its RoutePath) waits on another site (the
// association check): the edge host gives it a worker when it has one,
// so that the requests the primary takes do not wait behind it.
func Waits(path string) bool { return path == "/dashboard/settings/check" }

// Fetch asks the host to fetch files a merchant serves (the association
// check of the dashboard), all at once: deeplink_host.fetch, whose answer
// is the JSON of an []egress.File in the order of URLs.
type Fetch struct {
	URLs  []string `json:"urls"`
	Limit int64    `json:"limit"` // bytes read of each body at most
}

// A Fetch asks for at most MaxFetchURLs files and MaxFetchLimit bytes of
// each.
const (
	MaxFetchURLs  = 2
	MaxFetchLimit = 1 << 20
)

// FetchReplyCap is the size of the buffer that takes the answer to a
// Fetch of n URLs and limit: each body base64 in JSON, and room for the
// rest of its File.
func FetchReplyCap(n int, limit int64) int { return n * (int(limit)*4/3 + 16<<10) }
