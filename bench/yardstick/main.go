// Command yardstick is the reference server of bench/run.sh: plain
// net/http that reads the request body and answers what the register
// endpoint answers on success, with nothing else. Load tests report the
// service's throughput as a ratio to this one's, measured in the same run
// on the same machine, so a noisy or slow host cancels out.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
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
	flag.Parse()
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
