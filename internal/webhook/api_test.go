package webhook

import (
	"encoding/base64"
	"testing"
)

func TestCursor(t *testing.T) {
	own := cursorFor("we_a", 9)
	for _, tt := range []struct {
		name, cursor string
		want         bool
	}{
		{"its own", own, true},
		{"another endpoint's", cursorFor("we_b", 9), false},
		{"a sequence number alone", base64.RawURLEncoding.EncodeToString([]byte{0, 0, 0, 0, 0, 0, 0, 9}), false},
		{"too short", base64.RawURLEncoding.EncodeToString([]byte{1, 2, 3}), false},
		{"not base64", "!!!", false},
		{"empty", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidCursor("we_a", tt.cursor); got != tt.want {
				t.Errorf("ValidCursor(%q, %q) = %v; want %v", "we_a", tt.cursor, got, tt.want)
			}
		})
	}
	if seq, ok := parseCursor("we_a", own); !ok || seq != 9 {
		t.Errorf("parseCursor(%q, %q) = %d, %v; want 9, true", "we_a", own, seq, ok)
	}
}
