package main

import (
	"encoding/json"
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
// with the member's name (raw bytes between the quotes, escapes included)
// and its raw value. It returns errInvalidJSON, possibly after some calls,
// unless b is exactly one valid JSON object with optional white space
// around it.
func scanObject(b []byte, member func(name, value []byte)) error {
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
	b []byte
	i int
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
func (s *scanner) object(depth int, member func(name, value []byte)) bool {
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
		if !s.value(depth) {
			return false
		}
		if member != nil {
			member(name, s.b[vstart:s.i])
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
// caller's to judge.
func (s *scanner) str() bool {
	if s.peek() != '"' {
		return false
	}
	s.i++
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
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

// assign sets j from a raw JSON value: a string, null (absent), or
// anything else (present, but not a string). rawStr is raw as a string,
// so an unescaped value is a slice of it rather than a copy.
func (j *jsonString) assign(raw []byte, rawStr string) {
	*j = jsonString{}
	switch {
	case string(raw) == "null":
	case raw[0] != '"':
		j.set, j.bad = true, "must be a string"
	case !utf8.Valid(raw):
		j.set, j.bad = true, "must be valid UTF-8"
	default:
		j.set = true
		for _, c := range raw[1 : len(raw)-1] {
			if c == '\\' {
				json.Unmarshal(raw, &j.s)
				return
			}
		}
		j.s = rawStr[1 : len(rawStr)-1]
	}
}
