package main

import (
	"fmt"
	"runtime"
	"testing"
)

func TestAddIOProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	cpus := runtime.NumCPU()
	withExtra := cpus + 1
	if cpus < 2 {
		withExtra = cpus // one CPU: no other to keep serving
	}
	tests := []struct {
		env         string
		procs, want int // GOMAXPROCS before, and after addIOProc
	}{
		{"", cpus, withExtra},
		{"", 1, 1},
		{"", max(1, cpus-1), max(1, cpus-1)}, // a container limit lowered the default: left as it is
		{"", cpus + 2, cpus + 2},             // set by the program: left as it is
		{"2", cpus, cpus},                    // the operator's: left as it is
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("env=%q,procs=%d", tt.env, tt.procs), func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env)
			runtime.GOMAXPROCS(tt.procs)
			if got := addIOProc(); got != tt.want {
				t.Errorf("addIOProc() with %d CPUs, GOMAXPROCS %d = %d; want %d", cpus, tt.procs, got, tt.want)
			}
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Errorf("GOMAXPROCS after addIOProc = %d; want %d", got, tt.want)
			}
		})
	}
}
