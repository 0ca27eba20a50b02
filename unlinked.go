//go:build unix || wasip1

package main

import (
	"os"
	"syscall"
)

// unlinked reports whether f's file has been removed from its directory
// while f held it open (no link left), as far as f.Stat tells.
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false // the write that follows reports what is wrong
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
