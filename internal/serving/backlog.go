//go:build unix

package serving

import (
	"net"
	"syscall"
)

// cutBacklog cuts the backlog of ln, a listening socket, to nothing (on
// Linux, one connection): listen(2) again on a listening socket changes
// only its backlog. It reports whether it could.
func cutBacklog(ln net.Listener) bool {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), 0) }); err != nil {
		return false
	}
	return lerr == nil
}
