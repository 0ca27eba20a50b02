package main

import "unsafe"

// isZone reports whether name is a zone of the IANA database, as the
// host's database says: the module does not carry one (time/tzdata is
// 450 KB of it).
func isZone(name string) bool {
	return hostKnownZone(unsafe.Pointer(unsafe.StringData(name)), uint32(len(name))) == 1
}

// hostKnownZone is the host's known_zone(name, name_len) -> 1 or 0.
//
//go:wasmimport deeplink_host known_zone
func hostKnownZone(name unsafe.Pointer, n uint32) uint32
