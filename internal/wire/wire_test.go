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
		resp := &Response{Status: 422, Header: want.Header, Body: want.Body}
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
