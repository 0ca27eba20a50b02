package main

import (
	"deeplink/internal/config"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// A small JSON scanner for flat request bodies. encoding/json decodes the
// register body through reflection and a map (it must, to match member
// names exactly rather than case-insensitively), which cost about 40 % of
// the handler; this scanner validates the body and hands each top-level
// member over as raw bytes, without allocating. FuzzScanObject checks it
// against encoding/json.

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// scanObject calls member for each member of the JSON object b, in order,
// with the member's name (raw bytes between the quotes, escapes included),
// its raw value, and whether that value is a plain string: printable ASCII
// without escapes, quotes included in value. It returns errInvalidJSON, possibly after some calls,
// unless b is exactly one valid JSON object with optional white space
// around it.
func scanObject(b []byte, member func(name, value []byte, plain bool)) error {
	s := scanner{b: b}
	s.space()
	if s.peek() != '{' {
		return errInvalidJSON
	}
	if !s.object(1, member) {
		return errInvalidJSON
	}
	s.space()
	if s.i != len(s.b) {
		return errInvalidJSON
	}
	return nil
}

type scanner struct {
	b     []byte
	i     int
	plain bool // the last string scanned is printable ASCII without escapes
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object scans an object at s.i (which holds '{'), calling member, when
// not nil, for each of its members.
func (s *scanner) object(depth int, member func(name, value []byte, plain bool)) bool {
	if depth > maxJSONDepth {
		return false
	}
	s.i++ // '{'
	s.space()
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		start := s.i
		if !s.str() {
			return false
		}
		name := s.b[start+1 : s.i-1]
		s.space()
		if s.peek() != ':' {
			return false
		}
		s.i++
		s.space()
		vstart := s.i
		s.plain = false
		if !s.value(depth) {
			return false
		}
		if member != nil {
			member(name, s.b[vstart:s.i], s.plain && s.b[vstart] == '"')
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *scanner) array(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	s.i++ // '['
	s.space()
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *scanner) value(depth int) bool {
	switch c := s.peek(); {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object(depth+1, nil)
	case c == '[':
		return s.array(depth + 1)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// str scans a string at s.i (which must hold '"'). Like encoding/json it
// accepts any bytes but control characters; invalid UTF-8 is the
// caller's to judge. It sets s.plain when the string holds only printable
// ASCII and no escape, which spares its reader a second look.
func (s *scanner) str() bool {
	if s.peek() != '"' {
		return false
	}
	s.i++
	s.plain = true
	for s.i < len(s.b) {
		// Eight bytes at a time past the ordinary ones: most of a body.
		b, i := s.b, s.i // locals, which stay in registers
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		s.i = i
		if s.i == len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.plain = false
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !config.IsHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		case c >= 0x7f:
			s.plain = false
			s.i++
		default:
			s.i++
		}
	}
	return false
}

// special8 reports whether any of the eight bytes of w is one str must
// look at: a quote, a backslash, a control character, DEL or a byte of a
// multi-byte UTF-8 sequence. (The bit tricks are the "haszero", "hasless"
// and "hasmore" of Sean Anderson's Bit Twiddling Hacks; each is exact as a
// whole-word test.)
func special8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := w ^ (ones * '"')
	bslash := w ^ (ones * '\\')
	zeroQuote := (quote - ones) &^ quote
	zeroBslash := (bslash - ones) &^ bslash
	below20 := (w - ones*0x20) &^ w
	above7e := w + ones*(0x7f-0x7e) | w
	return (zeroQuote|zeroBslash|below20|above7e)&highs != 0
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.peek() == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

// hasLoneSurrogate reports whether the JSON string raw, quoted, as str
// accepts it, has a \u escape of a UTF-16 surrogate that is not half of
// a high-low pair. encoding/json decodes one to U+FFFD, as JavaScript's
// JSON.parse keeps it; either way the string is not valid Unicode, and two
// different ones (say a player id cut mid-emoji, "p\ud83d" and "p\ude00")
// would be stored as the same.
func hasLoneSurrogate(raw []byte) bool {
	esc := func(i int) (rune, bool) { // the \uXXXX at raw[i:], if it is one
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		r, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(r), err == nil
	}
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := esc(i)
		if !ok {
			i++ // the escaped character, which may be a backslash
			continue
		}
		i += 5
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if lo, ok := esc(i + 1); ok && 0xDC00 <= lo && lo < 0xE000 {
				i += 6
				continue
			}
			return true
		case 0xDC00 <= r && r < 0xE000:
			return true
		}
	}
	return false
}

// jsonName returns a member name as scanObject passes it, unescaped.
func jsonName(raw []byte) string {
	var s string
	json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s
}

// assign sets j from a raw JSON value: a string, null (absent), or
// anything else (present, but not a string). rawStr is raw as a string,
// so an unescaped value is a slice of it rather than a copy. plain says
// raw is a string of printable ASCII without escapes, as scanObject tells.
func (j *jsonString) assign(raw []byte, rawStr string, plain bool) {
	*j = jsonString{}
	switch {
	case plain:
		j.set, j.plain = true, true
		j.s = rawStr[1 : len(rawStr)-1]
	case string(raw) == "null":
	case raw[0] != '"':
		j.set, j.bad = true, "must be a string"
	case !utf8.Valid(raw):
		j.set, j.bad = true, "must be valid UTF-8"
	case hasLoneSurrogate(raw):
		j.set, j.bad = true, "must be valid UTF-8 (an escaped surrogate must be half of a pair)"
	default:
		j.set = true
		for _, c := range raw[1 : len(raw)-1] {
			if c == '\\' {
				// Into a local, not &j.s: a pointer into j handed to
				// encoding/json would move every request's body struct
				// to the heap.
				var s string
				json.Unmarshal(raw, &s)
				j.s = s
				return
			}
		}
		j.s = rawStr[1 : len(rawStr)-1]
	}
}
