//go:build !unix

package serving

import "net"

// cutBacklog cannot cut the backlog here (wasip1's listener is its
// host's): the listener closes at once.
func cutBacklog(net.Listener) bool { return false }
