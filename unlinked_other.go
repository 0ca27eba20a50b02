//go:build !unix && !wasip1

package main

import "os"

// unlinked reports false: this platform does not tell.
func unlinked(*os.File) bool { return false }
