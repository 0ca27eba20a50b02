//go:build !race

package main

// raceEnabled: the race detector is off.
const raceEnabled = false
