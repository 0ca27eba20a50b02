package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeliveryLogOrderSurvivesRestart: the log is read back oldest first,
// as it was made, though the store lists its records by id: the listing
// is newest first across pages after a restart as before it.
func TestDeliveryLogOrderSurvivesRestart(t *testing.T) {
	conf := whFast()
	conf.DataDir = t.TempDir()
	w1 := whStart(t, conf)
	rc := whNewReceiver(t, false, nil)
	ep, _ := w1.whEndpoint(t, rc.URL)
	var want []string // newest first
	for range 25 {
		want = append([]string{w1.whPublish(t, whStoreA, whKeyA, whOrder("o1", "pending"), "")}, want...)
	}
	w1.close()

	w2 := whStart(t, conf)
	var got []string
	for cursor := ""; ; {
		r := w2.do(t, whReq{method: "GET", path: whEndpointPath(whStoreA, ep) + "/deliveries?limit=10&cursor=" + cursor, key: whKeyA})
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.raw)
		got = append(got, whField(r.list(), "event_id")...)
		if cursor, _ = r.body["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the log after a restart lists %d deliveries; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("the log after a restart = %q; want %q (newest first)", got, want)
		}
	}
}
