package main

import (
	"bytes"
	"testing"
)

// FuzzRecord checks that code and session records round-trip through their
// encodings and that decoding arbitrary bytes never panics.
func FuzzRecord(f *testing.F) {
	f.Add([]byte{}, "https://shop.example.com/cb", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "player-42", "Ada", "Lovelace", "en", "EUR", "GB", "Europe/London")
	f.Add([]byte{kindCode}, "", "", "", "", "", "", "", "", "")
	f.Add([]byte{kindSession, 0, 0, 0, 0, 0, 0, 0, 0}, "\x00\xff", "\x80", "J\u00fcrgen", "", "", "", "", "", "")
	f.Add([]byte{kindCode, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, string(make([]byte, 300)), "", "", "", "", "", "", "", "")
	f.Add(redeemedValue(Key{1, 2, 3}), "a", "b", "c", "d", "e", "f", "g", "h", "i")
	f.Fuzz(func(t *testing.T, raw []byte, redirect, challenge, ref, first, last, lang, cur, country, tz string) {
		// Arbitrary bytes: no panic, and what decodes re-encodes to a
		// value that decodes the same.
		if c, ok := decodeCode(raw); ok {
			if again, ok := decodeCode(c.appendTo(nil)); !ok || again != c {
				t.Fatalf("decodeCode(%q) = %+v, which does not round-trip", raw, c)
			}
		}
		if s, ok := decodeSession(raw); ok {
			if again, ok := decodeSession(s.encode()); !ok || again != s {
				t.Fatalf("decodeSession(%q) = %+v, which does not round-trip", raw, s)
			}
		}
		if k, replayed, ok := decodeMarker(raw); ok {
			again := redeemedValue(k)
			if replayed {
				again = replayedValue(k)
			}
			if !bytes.Equal(again, raw) {
				t.Fatalf("decodeMarker(%q) = %x, %v, which does not round-trip", raw, k, replayed)
			}
		}

		p := Player{ref, first, last, lang, cur, country, tz}
		c := codeRecord{RedirectURI: redirect, CodeChallenge: challenge, Player: p}
		enc := c.appendTo(nil)
		if got, ok := decodeCode(enc); !ok || got != c {
			t.Fatalf("decodeCode(%+v.appendTo(nil)) = %+v, %v; want it back, true", c, got, ok)
		}
		if _, ok := decodeSession(enc); ok {
			t.Fatalf("decodeSession accepted the code record %q", enc)
		}
		if _, _, ok := decodeMarker(enc); ok {
			t.Fatalf("decodeMarker accepted the code record %q", enc)
		}
		// A record cut short or with a byte added is not a record.
		if _, ok := decodeCode(enc[:len(enc)-1]); ok {
			t.Fatalf("decodeCode accepted %q cut by one byte", enc)
		}
		if _, ok := decodeCode(append(bytes.Clone(enc), 0)); ok {
			t.Fatalf("decodeCode accepted %q with a byte added", enc)
		}

		s := sessionRecord{StoreID: redirect, Player: p}
		enc = s.encode()
		if got, ok := decodeSession(enc); !ok || got != s {
			t.Fatalf("decodeSession(%+v.encode()) = %+v, %v; want it back, true", s, got, ok)
		}
		if _, ok := decodeCode(enc); ok {
			t.Fatalf("decodeCode accepted the session record %q", enc)
		}
		if _, ok := decodeSession(enc[:len(enc)-1]); ok {
			t.Fatalf("decodeSession accepted %q cut by one byte", enc)
		}
	})
}
