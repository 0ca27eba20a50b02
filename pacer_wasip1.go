package main

// pacer does nothing in the edge build: the module runs only during the
// host's calls, and the host drives the timed work between requests, so
// a pause would only hold up the call.
type pacer struct{}

func (p *pacer) yield() {}
