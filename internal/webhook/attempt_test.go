package webhook

import (
	"errors"
	"net"
	"net/url"
	"testing"

	"deeplink/internal/egress"
)

// TestAttemptErrorText: the delivery log shows Go's error for a failed
// attempt, but for a failed lookup without the service's own resolver.
func TestAttemptErrorText(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "hooks.example.com", Server: "10.255.255.53:53", IsNotFound: true}
	for _, tt := range []struct {
		name string
		r    egress.Result
		want string
	}{
		{"lookup", egress.Result{Err: &url.Error{Op: "Post", URL: "https://hooks.example.com/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: dns}}},
			`Post "https://hooks.example.com/": dial tcp: lookup hooks.example.com: no such host`},
		{"lookup timed out", egress.Result{Timeout: true, Err: &net.DNSError{Err: "i/o timeout", Name: "hooks.example.com", Server: "[fd00::53]:53", IsTimeout: true}},
			"timed out: lookup hooks.example.com: i/o timeout"},
		{"refused", egress.Result{Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}},
			"dial tcp: connect: connection refused"},
	} {
		if got := (Attempt{}).complete(tt.r).Error; got != tt.want {
			t.Errorf("%s: complete(%v).Error = %q; want %q", tt.name, tt.r.Err, got, tt.want)
		}
	}
}
