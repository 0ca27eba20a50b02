package main

import "testing"

// FuzzSnapshotDecode feeds arbitrary bytes to the reader of an earlier
// build's snapshots: it refuses them or calls back with what it read, and
// never panics.
func FuzzSnapshotDecode(f *testing.F) {
	f.Add([]byte(legacySnapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		if _, err := decodeSnapshot(data, func(Key, int64, []byte) { n++ }); err != nil && n > 0 {
			t.Fatalf("decodeSnapshot(%q) failed after passing on %d records; want all or none", data, n)
		}
	})
}

// FuzzReplayLog feeds arbitrary bytes to the reader of an earlier build's
// logs, which must never panic.
func FuzzReplayLog(f *testing.F) {
	f.Add([]byte(logMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		replayLog(data, func(bool, Key, int64, []byte) {}, 1)
	})
}
