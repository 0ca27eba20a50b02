//go:build amd64 || arm64

package main

// prefetch asks the CPU to start loading the cache line at addr, and
// returns at once. It is only a hint: it never faults, whatever addr is.
// addr is a number rather than a pointer, so that an address gone stale
// (memory freed since) means nothing to the garbage collector.
//
// Go has no prefetch of its own, and a plain load would not do: the CPU
// retires instructions in order, so once its reorder buffer is full
// (a few hundred instructions on) it would wait for the line as long as
// the load it is meant to spare. The instruction is in prefetch_$GOARCH.s.
func prefetch(addr uintptr)
