package main

import (
	"bytes"
	"deeplink/internal/config"
	"encoding/binary"
	"encoding/json"
	"slices"
)

// A small JSON scanner for request bodies, under decodeObject. It
// validates a body as encoding/json does, refuses a member name given
// twice in any object, and hands each top-level member over as raw bytes.
// encoding/json sees names, and so a name given twice, only through its
// Decoder's tokens, each of which allocates; reading the register body
// that way takes far more than the 10 % of the register path's CPU that
// keeps a speed device (bench/README.md). FuzzDecodeObject checks this
// scanner, through decodeObject, against encoding/json.

// maxJSONDepth is encoding/json's nesting limit: deeper is not valid JSON
// to json.Valid, and not here either.
const maxJSONDepth = 10000

// scanObject calls member for each member of the top-level JSON object b,
// in order, with the member's name (raw bytes between the quotes, escapes
// included), its raw value, and whether that value is a plain string:
// printable ASCII without escapes, quotes included in value. It returns
// an invalid_json *apiError saying why, possibly after some calls, unless
// b is exactly one valid JSON object with optional white space around it,
// no object in it has a member name twice (names compared unescaped), and
// every name, at any depth, is valid Unicode (validUnicode).
func scanObject(b []byte, member func(name, value []byte, plain bool)) error {
	return scanObjectIn(b, "", member, nil)
}

// scanObjectIn is scanObject that also calls inner, as it calls member,
// for each member of an object that is the value of a top-level member
// named within (compared unescaped), before it calls member for that
// one. It spares a caller that wants members one level down a second
// scan of their object. Calls made before an error may be about bytes
// that break a rule: only a nil error says they do not.
func scanObjectIn(b []byte, within string, member, inner func(name, value []byte, plain bool)) error {
	var names [16]objectName
	s := scanner{b: b, names: names[:0], within: within}
	s.space()
	if s.peek() != '{' {
		return errInvalidJSON
	}
	if !s.object(1, member, inner) {
		if s.err != nil {
			return s.err
		}
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

	names     []objectName // the names of the objects open, outermost first
	unescaped []byte       // the names that had escapes, unescaped
	top       objectName   // the name of the top-level member being scanned
	err       *apiError    // why the body is refused, when not for its syntax
	within    string       // the top-level member whose object's members go to scanObjectIn's inner
}

// objectName is a member name as objects compare them: unescaped. It
// holds no pointer, so that sorting thousands of them writes no barrier.
type objectName struct {
	off, end  int  // the name is s.b[off:end], or s.unescaped[off:end]
	unescaped bool // in s.unescaped
}

func (s *scanner) name(n objectName) []byte {
	if n.unescaped {
		return s.unescaped[n.off:n.end]
	}
	return s.b[n.off:n.end]
}

func (s *scanner) compareNames(a, b objectName) int {
	return bytes.Compare(s.name(a), s.name(b))
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
// not nil, for each of its members, and inner for each member of the
// value of its member named s.within, when that value is an object.
func (s *scanner) object(depth int, member, inner func(name, value []byte, plain bool)) bool {
	if depth > maxJSONDepth {
		return false
	}
	s.i++ // '{'
	s.space()
	if s.peek() == '}' {
		s.i++
		return true
	}
	first := len(s.names) // this object's names are s.names[first:]
	for {
		start := s.i
		if !s.str() {
			return false
		}
		if !s.addName(start+1, s.i-1, depth) {
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
		var members func(name, value []byte, plain bool) // of the value, if an object
		if inner != nil && isName(name, s.within) {
			members = inner
		}
		if !s.value(depth, members) {
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
			return s.distinct(first)
		default:
			return false
		}
	}
}

// addName records the name s.b[off:end], raw as str scanned it, of a
// member of an object at depth; one that is not valid Unicode, at any
// depth, ends the scan: a name is never a field's value to refuse as a
// 422, and two different bad names would unescape alike.
func (s *scanner) addName(off, end, depth int) bool {
	n := objectName{off: off, end: end}
	raw := s.b[off:end]
	switch {
	case s.plain: // printable ASCII, no escapes: as it is
	case !validUnicode(raw):
		s.err = jsonError("a member name is not valid UTF-8")
		return false
	case bytes.IndexByte(raw, '\\') >= 0:
		n.off = len(s.unescaped)
		s.unescaped = append(s.unescaped, jsonName(raw)...)
		n.end, n.unescaped = len(s.unescaped), true
	}
	if depth == 1 {
		s.top = n
	}
	s.names = append(s.names, n)
	return true
}

// distinct reports whether the names of the object just scanned,
// s.names[first:], are all different, and drops them.
func (s *scanner) distinct(first int) bool {
	names := s.names[first:]
	s.names = s.names[:first]
	slices.SortFunc(names, s.compareNames)
	for i := 1; i < len(names); i++ {
		if s.compareNames(names[i-1], names[i]) == 0 {
			where := "the body"
			if first > 0 {
				where = "an object in " + quoteName(string(s.name(s.top)))
			}
			s.err = jsonError(where + " has the member " + quoteName(string(s.name(names[i]))) + " twice")
			return false
		}
	}
	return true
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
		if !s.value(depth, nil) {
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

// value scans a value at s.i, calling member for each member of it, when
// it is an object and member is not nil.
func (s *scanner) value(depth int, member func(name, value []byte, plain bool)) bool {
	switch c := s.peek(); {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object(depth+1, member, nil)
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

// jsonName returns a member name as scanObject passes it, unescaped.
func jsonName(raw []byte) string {
	var s string
	json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s
}

// isName reports whether raw, a member name as scanObject passes it, is
// name once unescaped.
func isName(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	return jsonName(raw) == name
}

// unquote decodes the raw JSON value raw as json.Unmarshal decodes one
// into a string, and reports whether that succeeded; raw nil fails, and
// null gives "". A string of printable ASCII without escapes is read
// without encoding/json, and one equal to a string of known is returned
// as that string, not as a copy.
func unquote(raw []byte, known ...string) (string, bool) {
	sc := scanner{b: raw}
	if sc.str() && sc.i == len(raw) && sc.plain {
		in := raw[1 : len(raw)-1]
		for _, k := range known {
			if string(in) == k {
				return k, true
			}
		}
		return string(in), true
	}
	var s string // on the heap, for json.Unmarshal: declared here so that only this path pays for it
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}
