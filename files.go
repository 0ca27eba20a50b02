package main

import (
	"errors"
	"io/fs"
	"os"
)

// exists reports whether there is a file at path; when it cannot tell, it
// says yes, and the write that follows reports the error.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
