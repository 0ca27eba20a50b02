package main

import (
	"log/slog"
	"time"

	"deeplink/internal/store/hoststore"
)

// openState returns the store the edge host provides (the host functions
// of deeplink_store): the module keeps no state of its own, so that any
// of the host's instances can serve any request, and one can be thrown
// away at any moment without losing anything acknowledged. The host's
// sender sends the deliveries the module makes.
func openState(cfg *Config, _ *slog.Logger, _ bool, _ func() time.Time) (*state, error) {
	c := hoststore.Imported()
	st := &state{store: c, remote: cfg.Storage.Backend == "redis"}
	if c.Len() >= 0 { // the host's backend counts its entries (not Redis)
		st.live = c.Len
		st.codes = func() int { return c.Count(keyPrefix, kindCode) }
	}
	return st, nil
}
