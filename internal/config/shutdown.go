package config

import (
	"fmt"
	"time"
)

// ShutdownConfig is the "shutdown" object of the configuration file: how
// the service stops on SIGTERM or SIGINT (docs/operations.md).
type ShutdownConfig struct {
	// Delay is how long, after the signal, /readyz answers 503 while
	// every other request is still served, before the service stops
	// taking requests: long enough for a load balancer's health checks
	// to take it out of rotation. 0, the default, stops at once.
	Delay Duration `json:"delay"`
}

// maxShutdownDelay bounds shutdown.delay: a balancer notices within a
// minute or so, and a service manager that waits for the stop (systemd's
// TimeoutStopSec) must wait longer than the delay.
const maxShutdownDelay = 5 * time.Minute

func (s *ShutdownConfig) validate() error {
	if s.Delay < 0 || s.Delay.D() > maxShutdownDelay {
		return fmt.Errorf("shutdown.delay: must not be negative, and at most %v", maxShutdownDelay)
	}
	return nil
}
