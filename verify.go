package main

import (
	"fmt"
	"io"
)

// runVerify is the verify subcommand (API.md §1). It returns the exit code.
func runVerify(args []string, stdin io.Reader, stdout io.Writer) int {
	fmt.Fprintln(stdout, "verify: not implemented yet")
	return 2
}
