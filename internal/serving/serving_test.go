package serving

import (
	"io"
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
