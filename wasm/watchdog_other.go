//go:build !unix

package main

import "time"

// watchdogEnv marks the host's own binary, run as the watchdog.
const watchdogEnv = "DEEPLINK_EDGE_WATCHDOG"

// Without Unix's shared memory and signals there is no watchdog: a call
// that runs past its deadline without calling the host is not stopped
// (docs/edge.md).
type watchdog struct{}

func startWatchdog(int, time.Duration) (*watchdog, error) { return nil, nil }
func (*watchdog) arm(int) int64                           { return 0 }
func (*watchdog) inHost(int, int64)                       {}
func (*watchdog) back(int, int64)                         {}
func (*watchdog) disarm(int)                              {}
func (*watchdog) stop()                                   {}
func watchdogMain(string) int                             { return 0 }
