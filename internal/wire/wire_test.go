package wire

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tests := []*Request{
		{Method: "GET", URI: "/healthz", Header: http.Header{}, Body: []byte{}},
		{Method: "POST", URI: "/stores/x/auth/auth-code?a=1", RemoteAddr: "127.0.0.1:5",
			Header: http.Header{"X-Api-Key": {"k"}, "Accept": {"a", "b"}}, Body: []byte(`{"a":1}`)},
	}
	for _, want := range tests {
		got, err := ParseRequest(AppendRequest(nil, want))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseRequest(AppendRequest(%+v)) = %+v, %v; want the same back", want, got, err)
		}
		resp := &Response{Status: 422, Header: want.Header, Body: want.Body, LogPath: want.URI, LogRoute: "POST /x/{id}"}
		gotResp, err := ParseResponse(AppendResponse(nil, resp))
		if err != nil || !reflect.DeepEqual(gotResp, resp) {
			t.Errorf("ParseResponse(AppendResponse(%+v)) = %+v, %v; want the same back", resp, gotResp, err)
		}
	}
}

// FuzzParseRequest checks that no input makes the parser panic and that
// whatever it accepts encodes back to the same bytes' meaning.
func FuzzParseRequest(f *testing.F) {
	f.Add(AppendRequest(nil, &Request{Method: "POST", URI: "/x", Header: http.Header{"A": {"b"}}, Body: []byte("hi")}))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		again, err := ParseRequest(AppendRequest(nil, r))
		if err != nil || again.Method != r.Method || again.URI != r.URI || !bytes.Equal(again.Body, r.Body) || !reflect.DeepEqual(again.Header, r.Header) {
			t.Fatalf("re-encoding %+v gave %+v, %v", r, again, err)
		}
	})
}

func TestPrimary(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/__fault/trap", true},
		{"/%5F_fault/trap", true},
		{"/stores/s1/webhooks", false},
		{"/stores/s1/events", false},
		{"/dashboard/webhooks", false},
		{"/metrics", false},
	} {
		if got := Primary(RoutePath(tt.path)); got != tt.want {
			t.Errorf("Primary(%q) = %v; want %v", tt.path, got, tt.want)
		}
	}
}

// TestQueues: the changes that may queue deliveries, as the module's mux
// matches their paths.
func TestQueues(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/stores/s1/events", true},
		{"/stores/s1/webhooks/ep_1/test", true},
		{"/stores/s1/webhooks/ep_1/deliveries/d_1/retry", true},
		{"/stores/s1/webhooks/ep_1/recover", true},
		{"/dashboard/webhooks/ep_1/test", true},
		{"/stores/s1/%65vents", true},
		{"/stores/s1/webhooks", false},
		{"/stores/s1/eventsx", false},
		{"/stores/s1/auth/auth-code", false},
		{"/dashboard/settings", false},
		{"/stores/s1/auth%2Fevents", false},
	} {
		if got := Queues(RoutePath(tt.path)); got != tt.want {
			t.Errorf("Queues(%q) = %v; want %v", tt.path, got, tt.want)
		}
	}
}

func TestWaits(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/dashboard/settings/check", true},
		{"/dashboard/settings/%63heck", true},
		{"/dashboard/settings", false},
		{"/dashboard/webhooks", false},
		{"/stores/s1/events", false},
	} {
		if got := Waits(RoutePath(tt.path)); got != tt.want {
			t.Errorf("Waits(%q) = %v; want %v", tt.path, got, tt.want)
		}
	}
}
