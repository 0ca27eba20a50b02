package egress

import (
	"net/netip"
	"testing"
)

func TestIsPublicAddr(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"255.255.255.255", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a00:1", false},
		{"2002:a00:1::", false},
		{"239.255.255.250", false},
		{"ff0e::1", false},
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"100.128.0.1", true},
		{"172.32.0.1", true},
		{"2606:4700::1111", true},
		{"::ffff:8.8.8.8", true},
	}
	for _, tt := range tests {
		if got := IsPublicAddr(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("IsPublicAddr(%q) = %v; want %v", tt.ip, got, tt.want)
		}
	}
}

func TestRefuseNonPublic(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "[::ffff:10.0.0.1]:80"} {
		if err := refuseNonPublic("tcp", addr, nil); err == nil {
			t.Errorf("refuseNonPublic(%q) = nil; want an error", addr)
		}
	}
	if err := refuseNonPublic("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("refuseNonPublic(8.8.8.8:443) = %v; want nil", err)
	}
}
