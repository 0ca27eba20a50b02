package webhook

import (
	"encoding/base64"
	"testing"
)

func TestCursor(t *testing.T) {
	own := logCursor("we_a", 9, "dlv_x")
	for _, tt := range []struct {
		name, cursor string
		want         bool
	}{
		{"its own", own, true},
		{"another endpoint's", logCursor("we_b", 9, "dlv_x"), false},
		{"a score alone", base64.RawURLEncoding.EncodeToString([]byte{0, 0, 0, 0, 0, 0, 0, 9}), false},
		{"no id", base64.RawURLEncoding.EncodeToString(append([]byte{0, 0, 0, 0, 0, 0, 0, 9}, cursorTag("we_a")...)), false},
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
	if score, id, ok := parseLogCursor("we_a", own); !ok || score != 9 || id != "dlv_x" {
		t.Errorf("parseLogCursor(%q, %q) = %d, %q, %v; want 9, dlv_x, true", "we_a", own, score, id, ok)
	}
}
