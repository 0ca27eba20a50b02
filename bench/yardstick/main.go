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
)

// okBody is byte for byte the service's success body, so both servers
// write the same response.
var okBody = []byte(`{"data":{"status":"ok"}}` + "\n")

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen address HOST:PORT")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(okBody)))
		w.Write(okBody)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
