package main

import (
	"os"
	"runtime"
)

// addIOProc lets one more goroutine run Go code than Go's default
// (GOMAXPROCS, the CPUs the process may use) when that default is two or
// more, and returns the setting in effect. An operator's GOMAXPROCS wins:
// when it is set, nothing changes.
//
// The store's fsyncs and the request log's writes are system calls that
// can block for milliseconds, and a goroutine blocked in one keeps its P
// until the runtime's monitor thread takes it back. Under steady load that
// thread sleeps up to 10 ms between looks, so a 1 ms fsync usually holds
// its P to the end. Measured under wrk on two CPUs: 64 fsyncs a second at
// 0.8 ms on average (up to 7 ms) and 190 log writes at 0.1 ms, about 80 ms
// a second in all during which one of the two Ps served no request, and
// the CPUs sat idle about 11 % of the time against 8 % for a bare server.
// The extra P lets the other CPU keep serving meanwhile.
//
// With one CPU there is no other CPU to keep serving, and the extra P's
// thread can only take turns with the one serving requests, in turns the
// kernel measures in milliseconds: pinned to one CPU, the service's p99
// went from 4 ms to 12 ms with it, even when it was added only while the
// ticker ran.
//
// Setting GOMAXPROCS stops Go from following a later change of the
// container's CPU limit; the limit at start-up is still respected.
func addIOProc() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || n < 2 {
		return n
	}
	runtime.GOMAXPROCS(n + 1)
	return n + 1
}
