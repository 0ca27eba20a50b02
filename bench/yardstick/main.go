// Command yardstick is the reference server of bench/run.sh: plain
// net/http that reads the request body and answers what the register
// endpoint answers on success, with nothing else. Load tests report the
// service's throughput as a ratio to this one's, measured in the same run
// on the same machine, so a noisy or slow host cancels out.
//
// With -dispatch URL it is bench/dispatch.sh's yardstick instead: for
// each POST (a published event) it makes the event's envelope, signs it
// as the service signs a delivery, POSTs it to URL, and answers 202 once
// URL answered 200; nothing is kept, nothing retried.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"deeplink/internal/egress"
	"deeplink/internal/signature"
	"deeplink/internal/webhook"
)

// burn runs n rounds of xorshift, whose result the caller must keep
// (sink) so that the compiler cannot drop the loop.
func burn(n int) uint64 {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

var sink atomic.Uint64

// okBody is byte for byte the service's success body, so both servers
// write the same response.
var okBody = []byte(`{"data":{"status":"ok"}}` + "\n")

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address HOST:PORT")
	spin := flag.Duration("spin", 0, "CPU to burn on each request, to calibrate the ratio (bench/run.sh MODE=spin)")
	target := flag.String("dispatch", "", "send each POST's event, signed, to this URL (bench/dispatch.sh)")
	flag.Parse()
	if *target != "" {
		log.Fatal(http.ListenAndServe(*addr, dispatcher(*target)))
	}
	var loops int // of burn, for spin
	if *spin > 0 {
		// A loop of arithmetic, timed once, rather than a loop on the
		// clock: a thread descheduled mid-spin would let the clock run
		// without burning the CPU.
		const n = 1 << 24
		start := time.Now()
		sink.Add(burn(n))
		loops = int(float64(n) * float64(*spin) / float64(time.Since(start)))
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if loops > 0 {
			sink.Add(burn(loops))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(okBody)))
		w.Write(okBody)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}

// dispatcher answers each POST of an event ({"type":…,"data":…}, as the
// service's publish takes it) by sending its envelope, the same fields
// as the service's with the event's id and created_at spliced in front
// (no parsing: the least a server can do), signed with the same headers,
// to target, from the request's own goroutine: as many sends at once as
// requests.
func dispatcher(target string) http.Handler {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	secret := signature.NewSecret()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 256<<10))
		if err != nil || len(body) < 2 || body[0] != '{' {
			http.Error(w, "a JSON object, please", http.StatusBadRequest)
			return
		}
		now := time.Now()
		id := webhook.NewID("evt_")
		env := fmt.Appendf(make([]byte, 0, len(body)+64), `{"id":%q,"created_at":%d,`, id, now.Unix())
		env = append(env, body[1:]...)
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, target, bytes.NewReader(env))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = webhook.DeliveryHeader(signature.Sign(secret, "", id, now.Unix(), env))
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, egress.MaxResponseBody))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			http.Error(w, "the receiver answered "+resp.Status, http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"data":{"id":%q}}`+"\n", id)
	})
}
