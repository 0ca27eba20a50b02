package egress

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIsPublicAddr(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"255.255.255.255", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a00:1", false},
		{"2002:a00:1::", false},
		{"239.255.255.250", false},
		{"ff0e::1", false},
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"100.128.0.1", true},
		{"172.32.0.1", true},
		{"2606:4700::1111", true},
		{"::ffff:8.8.8.8", true},
	}
	for _, tt := range tests {
		if got := IsPublicAddr(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("IsPublicAddr(%q) = %v; want %v", tt.ip, got, tt.want)
		}
	}
}

func TestRefuseNonPublic(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "[::ffff:10.0.0.1]:80"} {
		if err := refuseNonPublic("tcp", addr, nil); err == nil {
			t.Errorf("refuseNonPublic(%q) = nil; want an error", addr)
		}
	}
	if err := refuseNonPublic("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("refuseNonPublic(8.8.8.8:443) = %v; want nil", err)
	}
}

// TestGetFiles: each file as the check reads it, in the order asked,
// its body cut at the limit and its headers at maxFileHeader; an address
// that does not answer is an error of its own file only.
func TestGetFiles(t *testing.T) {
	long := "https://example.com/x" + strings.Repeat("é", maxFileHeader) // cut before a character, not inside one
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"applinks":{}}`)
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("x", 100))
		case "/moved":
			w.Header().Set("Location", long)
			w.WriteHeader(http.StatusMovedPermanently)
		}
	}))
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	c, err := NewClient(Options{Timeout: 5 * time.Second, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{srv.URL + "/json", srv.URL + "/big", srv.URL + "/moved", dead.URL + "/json"}
	got := GetFiles(t.Context(), c, urls, 64)
	want := []File{
		{Status: 200, ContentType: "application/json", Body: []byte(`{"applinks":{}}`)},
		{Status: 200, ContentType: "text/plain", Body: []byte(strings.Repeat("x", 64))},
		{Status: 301, Location: long[:maxFileHeader-1]},
		{},
	}
	if len(got) != len(want) {
		t.Fatalf("GetFiles(%q) = %d files; want %d", urls, len(got), len(want))
	}
	for i, f := range got {
		w := want[i]
		if i == len(want)-1 {
			if f.Status != 0 || f.Err == "" {
				t.Errorf("GetFiles: %s = %+v; want no status and an error", urls[i], f)
			}
			continue
		}
		if f.Status != w.Status || f.ContentType != w.ContentType || f.Location != w.Location || string(f.Body) != string(w.Body) || f.Err != "" {
			t.Errorf("GetFiles: %s = %+v; want %+v", urls[i], f, w)
		}
	}
}

// TestGetFilesAtOnce: the files are fetched at once, so a host that is
// slow for each costs its delay once: each answer here waits until both
// requests have arrived, longer than the client's timeout allows twice.
func TestGetFilesAtOnce(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	both := make(chan struct{})
	go func() { arrived.Wait(); close(both) }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		select {
		case <-both:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	c, err := NewClient(Options{Timeout: 5 * time.Second, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{srv.URL + "/a", srv.URL + "/b"}
	for i, f := range GetFiles(t.Context(), c, urls, 64) {
		if f.Status != http.StatusOK {
			t.Errorf("GetFiles: %s = %+v; want 200: fetched one after the other?", urls[i], f)
		}
	}
}
