//go:build !linux

package embedded

// syncData is Sync where fdatasync is not to be had.
func syncData(f file) error { return f.Sync() }
