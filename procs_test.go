package main

import (
	"runtime"
	"testing"
)

func TestAddIOProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	tests := []struct {
		env  string
		want func(before int) int
	}{
		{"", func(before int) int { return before + 1 }},
		{"3", func(before int) int { return before }}, // the operator's: left as it is
	}
	for _, tt := range tests {
		t.Run("GOMAXPROCS="+tt.env, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env)
			before := runtime.GOMAXPROCS(0)
			want := tt.want(before)
			if got := addIOProc(); got != want {
				t.Errorf("addIOProc() = %d; want %d", got, want)
			}
			if got := runtime.GOMAXPROCS(0); got != want {
				t.Errorf("GOMAXPROCS after addIOProc = %d; want %d", got, want)
			}
			runtime.GOMAXPROCS(before)
		})
	}
}
