//go:build !wasip1

package main

import (
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"deeplink/internal/store/redisstore/redistest"
)

// TestReplicaWebhooks runs two native replicas on one Redis and checks
// that they keep one webhook state (API.md §9): an endpoint made, changed
// or rotated through one is so on the other, and on an edge host; the limit of five endpoints
// holds over both; events published on both are each delivered once, and
// both show the one delivery log; and a replica killed while it sends a
// delivery leaves it to the other, which sends it within
// webhooks.timeout + 30 s.
func TestReplicaWebhooks(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on a lease: beside the others
	rd := redistest.New(t, redistest.Persistent...)
	a := startContractService(t, targetNative, ctRedisOpts(rd))
	bo := ctRedisOpts(rd)
	bo.publicBaseURL = a.URL
	b := startContractService(t, targetNative, bo)
	rc := ctNewReceiverOK(t)
	key := []string{"X-API-Key", ctKeyA}

	var ep string
	t.Run("endpoints and secrets are shared", func(t *testing.T) {
		var secret string
		ep, secret = a.createEndpoint(t, rc.URL)
		r := b.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, key...)
		ctStatus(t, r, http.StatusOK)
		assert.Equal(t, secret, r.data(t)["secret"], "the secret read on B of an endpoint made on A")

		r = b.do(t, http.MethodPost, ctHooks("/"+ep+"/rotate-secret"), nil, key...)
		ctStatus(t, r, http.StatusOK)
		rotated := r.data(t)["secret"]
		r = a.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, key...)
		ctStatus(t, r, http.StatusOK)
		assert.Equal(t, rotated, r.data(t)["secret"], "the secret read on A after a rotation on B")

		ctStatus(t, a.do(t, http.MethodPatch, ctHooks("/"+ep), map[string]any{"description": "changed on A"}, key...), http.StatusOK)
		r = b.do(t, http.MethodGet, ctHooks("/"+ep), nil, key...)
		ctStatus(t, r, http.StatusOK)
		assert.Equal(t, "changed on A", r.data(t)["description"], "the description read on B after a PATCH on A")

		// The edge host is a replica like the others.
		eo := ctRedisOpts(rd)
		eo.publicBaseURL = a.URL
		e := startContractService(t, targetWasm, eo)
		r = e.do(t, http.MethodGet, ctHooks("/"+ep+"/secret"), nil, key...)
		ctStatus(t, r, http.StatusOK)
		assert.Equal(t, rotated, r.data(t)["secret"], "the secret read on the edge host")
		ctStatus(t, e.do(t, http.MethodPatch, ctHooks("/"+ep), map[string]any{"description": "changed on E"}, key...), http.StatusOK)
		r = a.do(t, http.MethodGet, ctHooks("/"+ep), nil, key...)
		ctStatus(t, r, http.StatusOK)
		assert.Equal(t, "changed on E", r.data(t)["description"], "the description read on A after a PATCH on the edge host")
		e.stop() // the next cases find the lead on A or B
	})

	t.Run("events published on both are delivered once", func(t *testing.T) {
		const n = 10
		var events []string
		for i := range n {
			s := []*ctService{a, b}[i%2]
			events = append(events, s.publish(t, "order-"+strconv.Itoa(i)))
		}
		ctEventually(t, 60*time.Second, func() bool {
			for _, s := range []*ctService{a, b} {
				log := s.deliveries(t, ep)
				if len(log) != n || slices.ContainsFunc(log, func(d map[string]any) bool { return d["status"] != "succeeded" }) {
					return false
				}
			}
			return true
		}, "the %d deliveries never all succeeded in both replicas' logs", n)
		got := map[string]int{}
		for _, h := range rc.got() {
			got[h.header.Get("Webhook-Id")]++
		}
		for _, id := range events {
			assert.Equal(t, 1, got[id], "requests the receiver got for %s", id)
		}
		assert.Len(t, got, n, "events the receiver got")
		la, lb := a.deliveries(t, ep), b.deliveries(t, ep)
		assert.Equal(t, la, lb, "the delivery log on A and on B")
	})

	t.Run("five endpoints at most, over both", func(t *testing.T) {
		for _, s := range []*ctService{a, b, a} {
			s.createEndpoint(t, rc.URL)
		}
		// One place left: of six creations racing on both, one gets it.
		var created atomic.Int64
		var wg sync.WaitGroup
		for i := range 6 {
			s := []*ctService{a, b}[i%2]
			wg.Go(func() {
				r, err := s.send(http.MethodPost, ctHooks(""), map[string]any{"url": rc.URL, "events": []string{"order.status.updated"}}, key...)
				if assert.NoError(t, err) && r.status == http.StatusCreated {
					created.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(1), created.Load(), "creations that got the fifth place")
		for _, s := range []*ctService{a, b} {
			r := s.do(t, http.MethodGet, ctHooks(""), nil, key...)
			ctStatus(t, r, http.StatusOK)
			assert.Contains(t, string(r.body), ep)
			assert.Equal(t, 5, strings.Count(string(r.body), `"id":"we_`), "endpoints listed: %s", r.body)
		}
		// Room for the next case's endpoint, deleted on B.
		ctStatus(t, b.do(t, http.MethodDelete, ctHooks("/"+ep), nil, key...), http.StatusNoContent)
		ctStatus(t, a.do(t, http.MethodGet, ctHooks("/"+ep), nil, key...), http.StatusNotFound)
	})

	t.Run("a replica killed mid-delivery leaves it to the other", func(t *testing.T) {
		st := newStallingReceiver(t)
		stalled, _ := b.createEndpoint(t, st.URL)
		evt := a.publish(t, "order-stalled")
		ctEventually(t, 30*time.Second, func() bool { return st.first.Load() != nil }, "the first attempt never arrived")
		require.Equal(t, evt, *st.first.Load(), "the webhook-id of the first attempt")

		// The replica that sent it holds the connection the attempt came
		// on: the one to kill.
		sender, other := a, b
		port := *st.firstFrom.Load()
		if ownsPort(t, b.p.cmd.Process.Pid, port) {
			sender, other = b, a
		}
		require.True(t, ownsPort(t, sender.p.cmd.Process.Pid, port), "neither replica holds the connection of port %d", port)
		require.NoError(t, sender.p.cmd.Process.Kill())
		<-sender.p.exited

		const within = 5*time.Second + 30*time.Second // webhooks.timeout + 30 s
		ctEventually(t, within, func() bool { return st.delivered.Load() != nil }, "the other replica never sent the stalled delivery")
		assert.Equal(t, evt, *st.delivered.Load(), "the webhook-id of the attempt that succeeded")
		ctEventually(t, 10*time.Second, func() bool {
			log := other.deliveries(t, stalled)
			return len(log) == 1 && log[0]["status"] == "succeeded"
		}, "the delivery never succeeded in the log of the replica left")
	})
}

// stallingReceiver holds its first request until the client goes (its
// sender killed), and answers 200 to the next ones.
type stallingReceiver struct {
	*httptest.Server
	first, delivered atomic.Pointer[string] // webhook-ids: of the first request, of the first answered 200
	firstFrom        atomic.Pointer[int]    // the port the first request came from
}

func newStallingReceiver(t *testing.T) *stallingReceiver {
	rc := &stallingReceiver{}
	done := make(chan struct{})
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("Webhook-Id")
		_, p, _ := net.SplitHostPort(r.RemoteAddr)
		port, _ := strconv.Atoi(p)
		rc.firstFrom.CompareAndSwap(nil, &port)
		if rc.first.CompareAndSwap(nil, &id) {
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		rc.delivered.CompareAndSwap(nil, &id)
	}))
	t.Cleanup(func() { close(done); rc.Close() })
	return rc
}

// TestEdgeOnRedisSendsWebhooks: an edge host alone on Redis takes the
// delivery lease and sends, as a native replica does; a replica started
// beside it shows the same delivery log.
func TestEdgeOnRedisSendsWebhooks(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on a lease: beside the others
	rd := redistest.New(t, redistest.Persistent...)
	e := startContractService(t, targetWasm, ctRedisOpts(rd))
	rc := ctNewReceiverOK(t)
	ep, _ := e.createEndpoint(t, rc.URL)
	evt := e.publish(t, "order-edge")
	ctEventually(t, 30*time.Second, func() bool {
		d := e.deliveries(t, ep)
		return len(d) == 1 && d[0]["event_id"] == evt && d[0]["status"] == "succeeded"
	}, "the edge host never delivered %s", evt)
	require.Len(t, rc.got(), 1, "requests the receiver got")

	ao := ctRedisOpts(rd)
	ao.publicBaseURL = e.URL
	a := startContractService(t, targetNative, ao)
	assert.Equal(t, e.deliveries(t, ep), a.deliveries(t, ep), "the delivery log on the edge host and on a native replica")
}

// TestReplicaWebhookKills publishes on two replicas on one Redis, four
// workers taking turns between them, while one or the other (the sender
// or not) is killed (kill -9) and started again, three times; then every
// event either accepted (202) is delivered at least once (duplicates
// counted and logged: a sender killed mid-attempt sends it again), and
// both show the same delivery log.
func TestReplicaWebhookKills(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on a lease: beside the others
	seed := uint64(time.Now().UnixNano())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	rng := mrand.New(mrand.NewPCG(seed, 0))
	rd := redistest.New(t, redistest.Persistent...)
	o := ctRedisOpts(rd)
	o.loadTest = true
	a := startContractService(t, targetNative, o)
	o.publicBaseURL = a.URL
	b := startContractService(t, targetNative, o)
	replicas := []*ctService{a, b}
	rc := ctNewReceiverOK(t)
	ep, _ := a.createEndpoint(t, rc.URL)

	var mu sync.Mutex
	accepted := map[string]bool{}
	const rounds, workers = 3, 4
	for round := range rounds {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					s := replicas[(w+i)%2]
					r, err := s.send(http.MethodPost, "/stores/"+ctStoreA+"/events", map[string]any{
						"type": "order.status.updated",
						"data": map[string]any{"object": map[string]any{"id": fmt.Sprintf("o-%d-%d-%d", round, w, i), "status": "completed"}},
					}, "X-API-Key", ctKeyA)
					if err != nil || r.status != http.StatusAccepted {
						continue // a replica killed, or starting: nothing accepted
					}
					var v struct{ Data struct{ ID string } }
					if json.Unmarshal(r.body, &v) == nil {
						mu.Lock()
						accepted[v.Data.ID] = true
						mu.Unlock()
					}
				}
			})
		}
		// Load for a while, then the kill at a moment of its own.
		<-time.After(300*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond))))
		victim := replicas[rng.IntN(2)]
		require.NoError(t, victim.p.cmd.Process.Kill())
		<-victim.p.exited
		close(stop)
		wg.Wait()
		victim.client.CloseIdleConnections()
		victim.start()
	}

	mu.Lock()
	want := len(accepted)
	mu.Unlock()
	require.Positive(t, want, "events accepted")
	const within = 5*time.Second + 30*time.Second // webhooks.timeout + 30 s: a sender's take-over, and its sending
	var got map[string]int
	ctEventually(t, within+30*time.Second, func() bool {
		got = map[string]int{}
		for _, h := range rc.got() {
			got[h.header.Get("Webhook-Id")]++
		}
		for id := range accepted {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}, "of %d events accepted, some were never delivered", want)
	dups := 0
	for id := range accepted {
		dups += got[id] - 1
	}
	t.Logf("%d events accepted over %d kills, each delivered; %d requests again (a sender killed mid-attempt)", want, rounds, dups)
	ctEventually(t, 30*time.Second, func() bool {
		return slices.Equal(ctIDs(a.deliveries(t, ep)), ctIDs(b.deliveries(t, ep)))
	}, "A's and B's delivery logs never agreed")
}

// ctIDs are the ids and statuses of a delivery log's entries.
func ctIDs(log []map[string]any) []string {
	var ids []string
	for _, d := range log {
		ids = append(ids, fmt.Sprint(d["id"], " ", d["status"]))
	}
	return ids
}

// ownsPort reports whether the process pid holds the TCP socket whose
// local port on 127.0.0.1 is port (Linux: /proc/net/tcp gives the
// socket's inode, /proc/PID/fd the process's sockets).
func ownsPort(t *testing.T, pid, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	inode := ""
	local := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local {
			inode = f[9]
			break
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && l == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}
