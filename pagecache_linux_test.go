//go:build linux && (amd64 || arm64)

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"
)

// residentPages counts the pages of f's first n bytes that are in the page
// cache, with mincore(2) on a mapping of the file (mapping faults nothing in).
func residentPages(t *testing.T, f *os.File, n int) int {
	t.Helper()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer syscall.Munmap(m)
	vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident
}

func TestDropPageCache(t *testing.T) {
	const n = 1 << 20
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), n/16)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := residentPages(t, f, n)
	if err := dropPageCache(f); err != nil {
		t.Fatalf("dropPageCache: %v", err)
	}
	after := residentPages(t, f, n)
	// Elsewhere (tmpfs, overlays, filesystems that bypass the cache) the
	// advice may be ignored, and only its error and the data are checked.
	if cachesAndDrops(t, path) && (before == 0 || after != 0) {
		t.Errorf("resident pages of a synced 1 MiB file: %d before dropPageCache, %d after; want some, then none", before, after)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("file after dropPageCache: %d bytes, err %v; want the %d bytes written", len(got), err, len(data))
	}
}

// cachesAndDrops reports whether path is on a filesystem known to cache
// what is written and to drop clean pages when advised: ext4, XFS, Btrfs.
func cachesAndDrops(t *testing.T, path string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	switch st.Type {
	case 0xef53, 0x58465342, 0x9123683e: // ext2/3/4, XFS, Btrfs (statfs(2))
		return true
	}
	return false
}
