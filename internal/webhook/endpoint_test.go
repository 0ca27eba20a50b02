package webhook

import (
	"encoding/json"
	"testing"
)

// TestEndpointRecordOfAnEarlierBuild: an endpoint saved before
// disabled_reason and the failure window were kept reads as it was: a
// disabled one shows manual, and no window is open.
func TestEndpointRecordOfAnEarlierBuild(t *testing.T) {
	for _, tt := range []struct {
		rec  string
		want any
	}{
		{`{"id":"we_on","store_id":"s","url":"https://h.example.com/","description":"","events":["order.status.updated"],"enabled":true,"created_at":1,"updated_at":1,"secret":"whsec_x","next_seq":0}`, nil},
		{`{"id":"we_off","store_id":"s","url":"https://h.example.com/","description":"","events":["order.status.updated"],"enabled":false,"created_at":1,"updated_at":1,"secret":"whsec_x","next_seq":0}`, DisabledManual},
	} {
		var e Endpoint
		if err := json.Unmarshal([]byte(tt.rec), &e); err != nil {
			t.Fatal(err)
		}
		if got := e.view()["disabled_reason"]; got != tt.want {
			t.Errorf("disabled_reason of %s = %v; want %v", e.ID, got, tt.want)
		}
		if e.FailingSince != 0 {
			t.Errorf("%s: failing since %d; want no window open", e.ID, e.FailingSince)
		}
	}
}
