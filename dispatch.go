package main

import (
	"container/heap"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Delivery: pending deliveries wait in one timer heap (never a goroutine or
// timer each); one scheduler goroutine moves the due ones to a ready list,
// unless their endpoint already has perEndpointInFlight attempts under way,
// in which case they wait on the endpoint. A fixed pool of workers takes
// from the ready list. So a slow or dead endpoint holds at most
// perEndpointInFlight workers and never delays another endpoint.
const (
	dispatchWorkers     = 32
	perEndpointInFlight = 4
	maxResponseBody     = 4 << 10
)

// timerHeap orders pending deliveries by their next attempt.
type timerHeap []*delivery

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].NextAt < h[j].NextAt }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *timerHeap) Push(x any)        { d := x.(*delivery); d.index = len(*h); *h = append(*h, d) }
func (h *timerHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.index = -1
	return d
}
func (h *timerHeap) remove(d *delivery) { heap.Remove(h, d.index) }

// dispatcher is the running side of hooks: its goroutines and HTTP client.
type dispatcher struct {
	client *http.Client
	ctx    context.Context // cancelled by stop: attempts under way are abandoned and stay pending
	cancel context.CancelFunc
	cond   *sync.Cond // on hooks.mu; signalled when ready grows
	wg     sync.WaitGroup
}

// scheduleLocked puts the pending d in the timer heap. hk.mu must be held.
func (hk *hooks) scheduleLocked(d *delivery) {
	heap.Push(&hk.sched, d)
	if d.index == 0 {
		select {
		case hk.wake <- struct{}{}:
		default:
		}
	}
}

// start launches the scheduler and the workers.
func (hk *hooks) start() error {
	client, err := newWebhookClient(hk.cfg.Webhooks)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher{client: client, ctx: ctx, cancel: cancel, cond: sync.NewCond(&hk.mu)}
	hk.mu.Lock()
	hk.d = d
	hk.mu.Unlock()
	d.wg.Add(1 + dispatchWorkers)
	go hk.scheduler()
	for range dispatchWorkers {
		go hk.worker()
	}
	return nil
}

// stop ends the goroutines. Attempts under way are cancelled and their
// deliveries stay pending, due at once, to be sent after a restart.
func (hk *hooks) stop() {
	hk.mu.Lock()
	d := hk.d
	hk.closed = true
	if d != nil {
		d.cond.Broadcast()
	}
	hk.mu.Unlock()
	if d == nil {
		return
	}
	d.cancel()
	d.wg.Wait()
	d.client.CloseIdleConnections()
}

func (hk *hooks) scheduler() {
	defer hk.d.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		hk.mu.Lock()
		now := time.Now().UnixNano()
		for len(hk.sched) > 0 && hk.sched[0].NextAt <= now {
			hk.dueLocked(heap.Pop(&hk.sched).(*delivery))
		}
		wait := time.Hour
		if len(hk.sched) > 0 {
			wait = time.Duration(hk.sched[0].NextAt - now)
		}
		hk.mu.Unlock()
		t.Reset(wait)
		select {
		case <-hk.d.ctx.Done():
			return
		case <-hk.wake:
		case <-t.C:
		}
	}
}

// dueLocked hands the due d to a worker, or parks it on its endpoint when
// that endpoint is at its in-flight limit. hk.mu must be held.
func (hk *hooks) dueLocked(d *delivery) {
	e := hk.endpoints[d.EndpointID]
	if e == nil {
		return
	}
	if !e.Enabled && len(d.Attempts) > 0 {
		// Disabled since the last attempt: only enabled endpoints receive
		// (API.md §5.1), so the retries end here. First attempts still go:
		// the test call and a manual retry name the endpoint explicitly.
		d.Status, d.NextAt = statusFailed, 0
		hk.dirty = true
		return
	}
	if e.inflight >= perEndpointInFlight {
		e.waiting = append(e.waiting, d)
		return
	}
	e.inflight++
	hk.ready = append(hk.ready, d)
	hk.d.cond.Signal()
}

func (hk *hooks) worker() {
	defer hk.d.wg.Done()
	hk.mu.Lock()
	defer hk.mu.Unlock()
	for {
		for len(hk.ready) == 0 && !hk.closed {
			hk.d.cond.Wait()
		}
		if hk.closed {
			return
		}
		d := hk.ready[0]
		hk.ready[0] = nil
		hk.ready = hk.ready[1:]
		e := hk.endpoints[d.EndpointID]
		if e == nil { // deleted while queued
			continue
		}
		url := e.URL
		cur, old := e.secrets(time.Now())

		hk.mu.Unlock()
		a, retryAfter := hk.d.attempt(url, d.ev, cur, old)
		hk.mu.Lock()

		e.inflight--
		if len(e.waiting) > 0 {
			next := e.waiting[0]
			e.waiting = e.waiting[1:]
			e.inflight++
			hk.ready = append(hk.ready, next)
			hk.d.cond.Signal()
		}
		if hk.endpoints[d.EndpointID] == nil {
			continue
		}
		if hk.d.ctx.Err() != nil { // shutting down: send again after the restart
			d.NextAt = time.Now().UnixNano()
			continue
		}
		hk.recordLocked(d, a, retryAfter)
	}
}

// recordLocked adds a to d and decides what comes next: done on 200,
// failed after the last scheduled retry, otherwise the next attempt after
// the scheduled wait with up to 10 % jitter (or the receiver's
// Retry-After, capped at twice that wait). hk.mu must be held.
func (hk *hooks) recordLocked(d *delivery, a attempt, retryAfter time.Duration) {
	d.Attempts = append(d.Attempts, a)
	hk.dirty = true
	sched := hk.cfg.Webhooks.RetrySchedule
	n := len(d.Attempts)
	switch {
	case a.Status == http.StatusOK:
		d.Status, d.NextAt = statusSucceeded, 0
	case n > len(sched):
		d.Status, d.NextAt = statusFailed, 0
	default:
		wait := sched[n-1].D()
		wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		if retryAfter > 0 {
			wait = min(retryAfter, 2*sched[n-1].D())
		}
		d.NextAt = time.Now().Add(wait).UnixNano()
		hk.scheduleLocked(d)
	}
}

// signedHeaders are the per-attempt headers of a delivery; the rest are
// the same for every request.
type signedHeaders struct {
	id, sig, stdSig string
	t               int64
}

func requestHeaders(eventID string, a attempt) signedHeaders {
	return signedHeaders{id: eventID, sig: a.Signature, stdSig: a.StdSignature, t: a.Timestamp}
}

var userAgent = "deeplink-webhooks/" + productVersion()

func (h signedHeaders) apply(hd http.Header) {
	hd["Content-Type"] = []string{"application/json"}
	hd["User-Agent"] = []string{userAgent}
	hd["X-Webhook-Signature"] = []string{h.sig}
	hd["Webhook-Id"] = []string{h.id}
	hd["Webhook-Timestamp"] = []string{strconv.FormatInt(h.t, 10)}
	hd["Webhook-Signature"] = []string{h.stdSig}
}

func (h signedHeaders) toMap() map[string]string {
	hd := http.Header{}
	h.apply(hd)
	m := map[string]string{}
	for k, v := range hd {
		m[k] = v[0]
	}
	return m
}

// attempt makes one request of ev to url, signed with cur (and old, during
// a rotation). It returns the attempt as logged and the receiver's
// Retry-After on a 429 or 503.
func (d *dispatcher) attempt(url string, ev *event, cur, old string) (attempt, time.Duration) {
	start := time.Now()
	h := signedHeaders{id: ev.ID, t: start.Unix()}
	h.sig, h.stdSig = signDelivery(cur, old, ev.ID, h.t, ev.Body)
	a := attempt{At: start.UnixNano(), Timestamp: h.t, Signature: h.sig, StdSignature: h.stdSig}

	req, err := http.NewRequestWithContext(d.ctx, http.MethodPost, url, strings.NewReader(string(ev.Body)))
	if err != nil {
		a.Error = err.Error()
		return a, 0
	}
	h.apply(req.Header)
	resp, err := d.client.Do(req)
	if err != nil {
		a.DurationMS = time.Since(start).Milliseconds()
		a.Error = describeSendError(err)
		return a, 0
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	resp.Body.Close() // never read past 4 KiB: a huge body costs nothing more
	a.DurationMS = time.Since(start).Milliseconds()
	a.Status = resp.StatusCode
	a.ResponseBody = string(body)
	switch {
	case err != nil:
		a.Error = "reading the response: " + err.Error()
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		a.Error = fmt.Sprintf("answer 200: only HTTP 200 counts as success, %d does not", resp.StatusCode)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		a.Error = "redirects are not followed: answer 200 at the configured URL"
	default:
		a.Error = fmt.Sprintf("the receiver answered %d", resp.StatusCode)
	}
	var retryAfter time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return a, retryAfter
}

func describeSendError(err error) string {
	var ue interface{ Timeout() bool }
	if errors.As(err, &ue) && ue.Timeout() {
		return "timed out: " + err.Error()
	}
	return err.Error()
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// newWebhookClient returns the client deliveries use: the configured
// timeout for the whole exchange, no redirects followed, no proxy from the
// environment (it would bypass the address check), kept-alive connections,
// extra trusted roots, and, unless allow_insecure_urls, a check of every
// address actually dialled.
func newWebhookClient(c WebhookConfig) (*http.Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if c.TrustedCAFile != "" {
		pem, err := os.ReadFile(c.TrustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("webhooks.trusted_ca_file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("webhooks.trusted_ca_file: %s holds no PEM certificate", c.TrustedCAFile)
		}
	}
	dialer := &net.Dialer{Timeout: c.Timeout.D(), KeepAlive: 30 * time.Second}
	if !c.AllowInsecureURLs {
		dialer.Control = refuseNonPublic
	}
	return &http.Client{
		Timeout: c.Timeout.D(),
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   c.Timeout.D(),
			ResponseHeaderTimeout: c.Timeout.D(),
			MaxIdleConnsPerHost:   perEndpointInFlight,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

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
	if !isPublicAddr(ip) {
		return fmt.Errorf("refusing to connect to %s: not a public address (allow_insecure_urls is off)", ip)
	}
	return nil
}

// nonPublic are ranges the netip predicates do not cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("::/96"),           // IPv4-compatible
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 may reach private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2002::/16"),       // 6to4 embeds any IPv4
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
}

// isPublicAddr reports whether ip is a public unicast address: not
// loopback, private (RFC 1918, RFC 4193), link-local, CGNAT, multicast,
// unspecified, nor an IPv4-mapped form of those.
func isPublicAddr(ip netip.Addr) bool {
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

// Persistence: the whole webhook state is one JSON file, written
// atomically when it changed.
const hooksFileName = "webhooks.json"

type hooksFile struct {
	Endpoints   []*endpoint     `json:"endpoints"`
	Events      []*event        `json:"events"`
	Deliveries  []*delivery     `json:"deliveries"`
	Idempotency map[string]idem `json:"idempotency"`
}

// save writes the state to dir if it changed since the last save.
func (hk *hooks) save(dir string) error {
	hk.mu.Lock()
	if !hk.dirty {
		hk.mu.Unlock()
		return nil
	}
	f := hooksFile{Idempotency: hk.idem}
	for _, st := range hk.cfg.Stores {
		for _, e := range hk.byStore[st.ID] {
			f.Endpoints = append(f.Endpoints, e)
			f.Deliveries = append(f.Deliveries, e.log...)
		}
	}
	for _, ev := range hk.events {
		f.Events = append(f.Events, ev)
	}
	b, err := json.Marshal(&f)
	hk.dirty = false
	hk.mu.Unlock()
	if err == nil {
		err = writeFileAtomic(filepath.Join(dir, hooksFileName), b)
	}
	if err != nil {
		hk.mu.Lock()
		hk.dirty = true
		hk.mu.Unlock()
		return fmt.Errorf("saving webhooks: %w", err)
	}
	return nil
}

// load restores the state saved in dir, if any. Pending deliveries are
// scheduled again at their saved time (at once when that has passed).
func (hk *hooks) load(dir string) error {
	path := filepath.Join(dir, hooksFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	var f hooksFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("restore %s: %w (move the file away to start without it)", path, err)
	}
	hk.mu.Lock()
	defer hk.mu.Unlock()
	for _, e := range f.Endpoints {
		if hk.cfg.stores[e.StoreID] == nil {
			slog.Warn("webhooks: dropping endpoint of a store no longer configured", "endpoint", e.ID, "store", e.StoreID)
			continue
		}
		hk.endpoints[e.ID] = e
		hk.byStore[e.StoreID] = append(hk.byStore[e.StoreID], e)
	}
	for _, ev := range f.Events {
		hk.events[ev.ID] = ev
	}
	for _, d := range f.Deliveries {
		e := hk.endpoints[d.EndpointID]
		d.ev = hk.events[d.EventID]
		if e == nil || d.ev == nil {
			continue
		}
		d.index = -1
		hk.deliv[d.ID] = d
		e.log = append(e.log, d)
		if d.Status == statusPending {
			hk.scheduleLocked(d)
		}
	}
	if f.Idempotency != nil {
		hk.idem = f.Idempotency
	}
	return nil
}

// tick does the timed housekeeping: expired idempotency keys and rotation
// secrets go, and the state is saved if it changed.
func (hk *hooks) tick(now time.Time, dir string) error {
	hk.mu.Lock()
	for k, v := range hk.idem {
		if now.Unix() >= v.Expires {
			delete(hk.idem, k)
			hk.dirty = true
		}
	}
	for _, e := range hk.endpoints {
		if e.OldSecret != "" && now.Unix() >= e.OldSecretEnd {
			e.OldSecret, e.OldSecretEnd = "", 0
			hk.dirty = true
		}
	}
	hk.mu.Unlock()
	return hk.save(dir)
}
