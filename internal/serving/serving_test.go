package serving

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

func answer(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) })
}

func get(h http.Handler) string {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	return w.Body.String()
}

// TestSwitch checks that a Switch serves its first target until Set,
// then the new one, and that Set may race requests.
func TestSwitch(t *testing.T) {
	s := NewSwitch(answer("starting"))
	if got := get(s); got != "starting" {
		t.Fatalf("before Set: %q; want %q", got, "starting")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if got := get(s); got != "starting" && got != "serving" {
					t.Errorf("during Set: %q", got)
					return
				}
			}
		})
	}
	s.Set(answer("serving"))
	wg.Wait()
	if got := get(s); got != "serving" {
		t.Fatalf("after Set: %q; want %q", got, "serving")
	}
}

func TestDemoHost(t *testing.T) {
	tests := []struct {
		ip   net.IP
		want string
	}{
		{net.IPv4(127, 0, 0, 1), "127.0.0.1:8080"},
		{net.IPv4zero, "127.0.0.1:8080"}, // every address: reached at loopback
		{net.IPv6unspecified, "127.0.0.1:8080"},
		{net.IPv6loopback, "localhost:8080"},
		{net.IPv4(192, 0, 2, 7), "192.0.2.7:8080"}, // not a loopback: as it is, with a warning
	}
	for _, tt := range tests {
		if got := DemoHost(&net.TCPAddr{IP: tt.ip, Port: 8080}); got != tt.want {
			t.Errorf("DemoHost(%v) = %q; want %q", tt.ip, got, tt.want)
		}
	}
}
