//go:build race

package main

// raceEnabled: the race detector is on, so allocation counts are not exact.
const raceEnabled = true
