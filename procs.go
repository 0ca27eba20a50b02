package main

import (
	"os"
	"runtime"
)

// addIOProc lets one more goroutine run Go code than there are CPUs, and
// returns the GOMAXPROCS in effect. It does so only when Go's default is
// every CPU the process may run on (sched_getaffinity), two or more, and
// no one chose otherwise: with GOMAXPROCS in the environment, or a
// container CPU limit that lowered the default, nothing changes.
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
// ticker ran. A container's CPU limit is the same case: the extra P would
// only run over the quota (Go rounds a limit under two CPUs up to two).
//
// Setting GOMAXPROCS stops Go from following later changes of the
// process's CPU affinity.
func addIOProc() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" || n < 2 || n != runtime.NumCPU() {
		return n
	}
	runtime.GOMAXPROCS(n + 1)
	return n + 1
}
