package config

import (
	"testing"
	"time"
)

// TestShutdown: shutdown.delay's default, a value read, and the errors
// naming the field.
func TestShutdown(t *testing.T) {
	for _, tt := range []struct {
		in   string // the shutdown object; "" for none
		want time.Duration
		err  string
	}{
		{"", 0, ""},
		{`{}`, 0, ""},
		{`{"delay": "10s"}`, 10 * time.Second, ""},
		{`{"delay": "5m"}`, 5 * time.Minute, ""},
		{`{"delay": "0s"}`, 0, ""},
		{`{"delay": "-1s"}`, 0, "config: shutdown.delay: must not be negative, and at most 5m0s"},
		{`{"delay": "6m"}`, 0, "config: shutdown.delay: must not be negative, and at most 5m0s"},
		{`{"delay": "10 seconds"}`, 0, `config: shutdown.delay: "10 seconds" is not a duration such as "5m"`},
		{`{"delay": 10}`, 0, `config: shutdown.delay: 10 is not a duration such as "5m"`},
		{`{"grace": "10s"}`, 0, `config: line 1, column 15: unknown field "grace"`},
	} {
		in := `{"stores": [` + minimalStore + `]}`
		if tt.in != "" {
			in = `{"shutdown": ` + tt.in + `, "stores": [` + minimalStore + `]}`
		}
		c, err := Parse([]byte(in))
		switch {
		case tt.err != "":
			if err == nil || err.Error() != tt.err {
				t.Errorf("Parse(%q) error = %v; want %q", in, err, tt.err)
			}
		case err != nil:
			t.Errorf("Parse(%q) error = %v; want nil", in, err)
		case c.Shutdown.Delay.D() != tt.want:
			t.Errorf("Parse(%q).Shutdown.Delay = %v; want %v", in, c.Shutdown.Delay.D(), tt.want)
		}
	}
}
