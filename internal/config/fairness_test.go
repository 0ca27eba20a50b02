package config

import "testing"

// TestFairness: the defaults, a store's default share of the live-entry
// budget, and the errors naming each bad field.
func TestFairness(t *testing.T) {
	c, err := Parse([]byte(`{"max_live_entries": 1000, "stores": [` + minimalStore + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Fairness, (FairnessConfig{KeyRate: 1000, KeyBurst: 10_000}); got != want {
		t.Errorf("Parse(no fairness).Fairness = %+v; want %+v", got, want)
	}
	if got := c.StoreShare(); got != 1000 {
		t.Errorf("StoreShare() of one store = %d; want 1000", got)
	}
	c.Stores = append(c.Stores, c.Stores[0], c.Stores[0], c.Stores[0])
	if got := c.StoreShare(); got != 250 {
		t.Errorf("StoreShare() of four stores = %d; want 250", got)
	}
	c.Fairness.StoreMaxLiveEntries = 600
	if got := c.StoreShare(); got != 600 {
		t.Errorf("StoreShare() with store_max_live_entries 600 = %d; want 600", got)
	}
	for _, tt := range []struct{ in, want string }{
		{`{"key_rate": 0}`, "config: fairness.key_rate: must be positive (requests a second), at most 1e9"},
		{`{"key_rate": -1}`, "config: fairness.key_rate: must be positive (requests a second), at most 1e9"},
		{`{"key_burst": 0}`, "config: fairness.key_burst: must be at least 1"},
		{`{"store_max_live_entries": -1}`, "config: fairness.store_max_live_entries: must be 0 (the store's share of max_live_entries) or positive"},
	} {
		in := `{"fairness": ` + tt.in + `, "stores": [` + minimalStore + `]}`
		if _, err := Parse([]byte(in)); err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) error = %v; want %q", in, err, tt.want)
		}
	}
}
