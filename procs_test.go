package main

import (
	"fmt"
	"runtime"
	"testing"
)

func TestAddIOProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	tests := []struct {
		env         string
		procs, want int // GOMAXPROCS before, and after addIOProc
	}{
		{"", 1, 1}, // one CPU: no other to keep serving
		{"", 2, 3},
		{"", 8, 9},
		{"2", 2, 2}, // the operator's: left as it is
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("GOMAXPROCS=%q/%d", tt.env, tt.procs), func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env)
			runtime.GOMAXPROCS(tt.procs)
			if got := addIOProc(); got != tt.want {
				t.Errorf("addIOProc() = %d; want %d", got, tt.want)
			}
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Errorf("GOMAXPROCS after addIOProc = %d; want %d", got, tt.want)
			}
		})
	}
}
