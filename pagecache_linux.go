//go:build linux && (amd64 || arm64)

package main

import (
	"os"
	"syscall"
)

// posixFadvDontNeed is POSIX_FADV_DONTNEED on Linux.
const posixFadvDontNeed = 4

// dropPageCache asks the kernel to let go of f's cached pages. The store
// calls it on files it has just synced: it reads them only at start-up, so
// caching what it writes would hold every live code twice, once in the
// heap and once in the page cache. The price is paid at a restart, which
// reads the files from disk rather than from the cache: about 250 MB for
// a million live codes. Pages let go of are reused by the next
// writes, where fresh pages cost this project's VMs 13 µs each to touch
// (against 2 for reused ones). Dirty pages stay, but Linux starts writing
// them back. The call is advice: ignoring its error costs only memory.
func dropPageCache(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_FADVISE64, fd, 0, 0, posixFadvDontNeed, 0, 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
