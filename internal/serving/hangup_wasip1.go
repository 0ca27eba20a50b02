package serving

// IgnoreHangups does nothing in a WebAssembly module: signals go to its
// host, which ignores SIGHUP itself.
func IgnoreHangups() {}
