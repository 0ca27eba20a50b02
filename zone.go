//go:build !wasip1

package main

import (
	"time"

	_ "time/tzdata" // timezone checks must work in a static binary without /usr/share/zoneinfo
)

// isZone reports whether name is a zone of the IANA database.
func isZone(name string) bool {
	_, err := time.LoadLocation(name)
	return err == nil
}
