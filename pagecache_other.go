//go:build !(linux && (amd64 || arm64))

package main

import "os"

// dropPageCache does nothing here: the advice is Linux's, and the edge
// build's files belong to its host.
func dropPageCache(*os.File) error { return nil }
