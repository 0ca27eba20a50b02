package config

import "errors"

// FairnessConfig is the "fairness" object of the configuration file.
type FairnessConfig struct {
	// KeyRate and KeyBurst are each API key's request budget: a bucket of
	// KeyBurst requests, refilled at KeyRate a second.
	KeyRate  float64 `json:"key_rate"`
	KeyBurst int     `json:"key_burst"`
	// StoreMaxLiveEntries caps the entries one store's sign-ins hold live
	// (each code, two a session); 0, the default, is its share:
	// MaxLiveEntries over the number of stores.
	StoreMaxLiveEntries int `json:"store_max_live_entries"`
}

// StoreShare is how many entries one store's sign-ins may hold live
// (StoreMaxLiveEntries, or its default share).
func (c *Config) StoreShare() int {
	if c.Fairness.StoreMaxLiveEntries > 0 {
		return c.Fairness.StoreMaxLiveEntries
	}
	return max(1, c.MaxLiveEntries/max(1, len(c.Stores)))
}

func (f *FairnessConfig) validate() error {
	switch {
	case !(f.KeyRate > 0) || f.KeyRate > 1e9:
		return errors.New("fairness.key_rate: must be positive (requests a second), at most 1e9")
	case f.KeyBurst < 1:
		return errors.New("fairness.key_burst: must be at least 1")
	case f.StoreMaxLiveEntries < 0:
		return errors.New("fairness.store_max_live_entries: must be 0 (the store's share of max_live_entries) or positive")
	}
	return nil
}
