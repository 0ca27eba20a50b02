package webhook

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"deeplink/internal/config"
	"deeplink/internal/egress"
	"deeplink/internal/signature"
)

// Attempt is one HTTP request of a delivery. The request headers other
// than the signatures are fixed, so only those are kept.
type Attempt struct {
	At           int64  `json:"at"`            // unix nanoseconds
	URL          string `json:"url,omitempty"` // where it was sent: the endpoint's URL then (absent from state saved before it was kept)
	Timestamp    int64  `json:"t"`             // the signed timestamp, unix seconds
	Signature    string `json:"sig"`
	StdSignature string `json:"std_sig"`
	Status       int    `json:"status,omitempty"`
	ResponseBody string `json:"response_body,omitempty"` // first 4 KiB
	DurationMS   int64  `json:"duration_ms"`
	Error        string `json:"error,omitempty"`
}

// complete fills in a from the outcome of its request.
func (a Attempt) complete(r egress.Result) Attempt {
	a.DurationMS = r.Duration.Milliseconds()
	a.Status = r.Status
	a.ResponseBody = string(r.Body)
	switch {
	case r.Err != nil && r.Status == 0 && r.Timeout:
		a.Error = "timed out: " + errText(r.Err)
	case r.Err != nil && r.Status == 0:
		a.Error = errText(r.Err)
	case r.Err != nil:
		a.Error = "reading the response: " + errText(r.Err)
	case r.Status == http.StatusOK:
	case r.Status >= 200 && r.Status < 300:
		a.Error = fmt.Sprintf("answer 200: only HTTP 200 counts as success, %d does not", r.Status)
	case r.Status >= 300 && r.Status < 400:
		a.Error = "redirects are not followed: answer 200 at the configured URL"
	default:
		a.Error = fmt.Sprintf("the receiver answered %d", r.Status)
	}
	return a
}

// errText is err's message as the delivery log shows it to the merchant:
// Go's, but for a failed lookup's resolver address, which is the
// service's own network's business.
func errText(err error) string {
	var dns *net.DNSError
	if !errors.As(err, &dns) || dns.Server == "" {
		return err.Error()
	}
	bare := *dns
	bare.Server = ""
	return strings.Replace(err.Error(), dns.Error(), bare.Error(), 1)
}

// ok reports whether a succeeded: a 200 whose body was read (not one
// whose body then timed out).
func (a *Attempt) ok() bool { return a.Status == http.StatusOK && a.Error == "" }

// nextStep decides what follows the n-th attempt of a delivery, ok when
// it succeeded, refused the reason its endpoint now refuses it ("" when
// it does not): succeeded; failed, with why, after the last scheduled
// retry or when refused; or pending, the next attempt after wait, the
// schedule's step with up to 10 % jitter (a receiver's Retry-After moves
// nothing: the schedule is the one docs/api.md promises).
func nextStep(sched []config.Duration, n int, ok bool, refused string) (status, reason string, wait time.Duration) {
	switch {
	case ok:
		return StatusSucceeded, "", 0
	case n > len(sched):
		return StatusFailed, ReasonRetriesUsedUp, 0
	case refused != "":
		return StatusFailed, refused, 0
	}
	wait = sched[n-1].D()
	return StatusPending, "", wait + time.Duration(rand.Int64N(int64(wait)/10+1))
}

// UserAgent is the User-Agent of every webhook request: the service
// adds its version.
var UserAgent = "deeplink-webhooks"

// DeliveryHeader is the whole header of an attempt: its signatures, and
// the rest, which is the same for every request.
func DeliveryHeader(sig signature.Headers) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "User-Agent": {UserAgent}}
	sig.Apply(h)
	return h
}
