//go:build !unix

package main

import "time"

// processCPU is unknown here; benchmarks then report 0 cpu-ns/op.
func processCPU() time.Duration { return 0 }
