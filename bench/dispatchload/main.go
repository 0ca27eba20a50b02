// Command dispatchload is bench/dispatch.sh's receiver and load, two
// processes of one program.
//
// With -serve ADDR it is a merchant's receiver: it answers 200 to each
// delivery and counts the distinct webhook-ids it has had (a delivery
// sent twice, at least once as promised, counts once); GET /count?at_least=K
// answers that count once it is at least K, or after -timeout.
//
// Otherwise it is the load: it reads the receiver's count, publishes -n
// events to -url from -c goroutines (each POST with -key as X-API-Key,
// expecting 202), and waits until the receiver has counted -n more. It
// prints one line, "events N published S delivered S": the seconds from
// the first publish to the last answer, and to the last delivery. Exit 1
// when a publish failed or a delivery did not arrive within the
// receiver's -timeout.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// order is the data.object of every event: the order of the in-process
// benchmark (dispatch_bench_test.go's benchOrder).
const order = `{"id":"ord_01JGQ7ZK3M9X4VB2C8D5E6F7GH","status":"completed","previous_status":"pending",` +
	`"amount":{"value":"49.99","currency":"EUR"},"items":[{"sku":"gems-1200","quantity":1}],` +
	`"customer":{"client_reference_id":"3f2504e0-4f89-41d3-9a0c-0305e82c3301"},"updated_at":1735689600}`

func main() {
	serve := flag.String("serve", "", "be the receiver, on this address")
	url := flag.String("url", "", "where events are published: http://HOST:PORT/stores/ID/events")
	key := flag.String("key", "", "X-API-Key of the publishes")
	recv := flag.String("receiver", "http://127.0.0.1:18291", "the receiver's base URL")
	n := flag.Int("n", 10000, "events to publish")
	c := flag.Int("c", 64, "publishers at once")
	timeout := flag.Duration("timeout", 2*time.Minute, "the receiver's: how long a count waits at most")
	flag.Parse()
	if *serve != "" {
		rc := &receiver{seen: map[string]bool{}, grew: make(chan struct{}), timeout: *timeout}
		log.Fatal(http.ListenAndServe(*serve, rc))
	}
	if *url == "" || *n < 1 || *c < 1 {
		flag.Usage()
		os.Exit(2)
	}
	before, err := count(*recv, 0)
	if err != nil {
		log.Fatal(err)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *c}, Timeout: 30 * time.Second}
	body := []byte(`{"type":"order.status.updated","data":{"object":` + order + `}}`)
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *c {
		wg.Go(func() {
			for next.Add(1) <= int64(*n) {
				if err := publish(client, *url, *key, body); err != nil && failed.Add(1) == 1 {
					log.Print(err)
				}
			}
		})
	}
	wg.Wait()
	published := time.Since(start)
	if f := failed.Load(); f > 0 {
		log.Fatalf("%d of %d publishes failed", f, *n)
	}
	got, err := count(*recv, before+*n)
	if err != nil {
		log.Fatal(err)
	}
	if got < before+*n {
		log.Fatalf("%d of %d deliveries arrived within the receiver's timeout", got-before, *n)
	}
	fmt.Printf("events %d published %.3f delivered %.3f\n", *n, published.Seconds(), time.Since(start).Seconds())
}

// receiver counts the distinct webhook-ids of the deliveries it is sent.
type receiver struct {
	timeout time.Duration

	mu   sync.Mutex // guards the fields below
	seen map[string]bool
	grew chan struct{} // closed, and made anew, as seen grows
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/count" {
		k, _ := strconv.Atoi(r.URL.Query().Get("at_least"))
		fmt.Fprintln(w, rc.wait(k))
		return
	}
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusOK)
	id := r.Header.Get("webhook-id")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if id != "" && !rc.seen[id] {
		rc.seen[id] = true
		close(rc.grew)
		rc.grew = make(chan struct{})
	}
}

// wait returns the count once it is at least k, or as it is after
// rc.timeout.
func (rc *receiver) wait(k int) int {
	deadline := time.After(rc.timeout)
	for {
		rc.mu.Lock()
		n, grew := len(rc.seen), rc.grew
		rc.mu.Unlock()
		if n >= k {
			return n
		}
		select {
		case <-grew:
		case <-deadline:
			return n
		}
	}
}

// count asks the receiver at base for its count, once it is at least k.
func count(base string, k int) (int, error) {
	resp, err := http.Get(base + "/count?at_least=" + strconv.Itoa(k))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(b)))
}

// publish POSTs one event and reads the answer, which must be 202.
func publish(client *http.Client, url, key string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("publish answered %d: %s", resp.StatusCode, b)
	}
	return nil
}
