package embedded

import (
	"os"
	"syscall"
)

// syncData writes f's data to disk, and its metadata only where reading
// the data needs it (fdatasync): the journal's size does not change
// between writes, as it is filled with zeros ahead.
func syncData(f file) error {
	if osf, ok := f.(*os.File); ok {
		return syscall.Fdatasync(int(osf.Fd()))
	}
	return f.Sync()
}
