package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Every JSON request body (register, the token endpoint's JSON form,
// webhook create and PATCH, publish) is read by decodeObject, so that one
// set of rules holds for all of them.

// maxJSONDepth is encoding/json's nesting limit: deeper is not valid JSON
// to json.Valid, and not here either.
const maxJSONDepth = 10000

// decodeObject decodes b, which must be exactly one JSON object (white
// space around it aside), into the struct v points to. A member fills the
// field whose json tag names it exactly, case included: encoding/json
// alone would let "Auth_Code" fill auth_code, and "URL" url. Other members
// are ignored. It returns a 400 invalid_json *apiError saying which rule
// the body breaks, and fills nothing, when
//   - b is not one JSON object;
//   - an object anywhere in b, nested ones included, has a member name
//     twice (names compared once unescaped): parsers disagree on which of
//     two wins, and an event's data.object reaches merchants as sent;
//   - a member name of the top-level object is not valid Unicode (invalid
//     UTF-8, or an escaped UTF-16 surrogate that is not half of a pair);
//   - a member no field takes holds invalid Unicode anywhere in its value.
//
// A known member's value goes to its field as it is, invalid Unicode
// included: that is the field's to refuse, as a 422 naming it. Fields are
// therefore jsonString, which records why it is unacceptable, or
// json.RawMessage, whose reader checks validUnicode.
func decodeObject(b []byte, v any) error {
	rv := reflect.ValueOf(v).Elem()
	known := fieldsOf(rv.Type())
	type found struct {
		field int
		raw   []byte
		s     string // a string's value, unescaped
	}
	var buf [16]found
	members := buf[:0]
	var s string
	err := walkObject(b, func(name string) any {
		if i, ok := known[name]; ok && rv.Field(i).Type() == jsonStringType {
			s = ""
			return &s
		}
		return nil
	}, func(name string, raw []byte) error {
		i, ok := known[name]
		switch {
		case ok:
			members = append(members, found{i, raw, s})
		case !validUnicode(raw):
			return jsonError("the member " + quoteName(name) + ", which this request does not use, is not valid UTF-8")
		}
		s = ""
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range members {
		switch f := rv.Field(m.field).Addr().Interface().(type) {
		case *jsonString:
			f.fill(m.raw, m.s)
		case *json.RawMessage:
			*f = append(json.RawMessage(nil), m.raw...) // a copy: b is the caller's buffer
		}
	}
	return nil
}

var (
	jsonFieldsOf   sync.Map // reflect.Type → map[string]int, json name → field index
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	jsonStringType = reflect.TypeFor[jsonString]()
)

// fieldsOf returns the json names of the fields of the struct type t. It
// panics on a field of another type than decodeObject allows.
func fieldsOf(t reflect.Type) map[string]int {
	if m, ok := jsonFieldsOf.Load(t); ok {
		return m.(map[string]int)
	}
	m := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if f.Type != rawMessageType && f.Type != jsonStringType {
			panic("decodeObject: field " + t.String() + "." + f.Name + " is a " + f.Type.String() + ", not a json.RawMessage or jsonString")
		}
		m[name] = i
	}
	jsonFieldsOf.Store(t, m)
	return m
}

// skipValue consumes a JSON value without keeping it.
type skipValue struct{}

func (*skipValue) UnmarshalJSON([]byte) error { return nil }

// memberName is a member name within one object of a body: obj numbers
// the objects in the order they open. A name that is not valid Unicode is
// kept raw, since two different ones unescape to the same U+FFFD.
type memberName struct {
	obj  int
	name string
	raw  bool
}

// walkObject reads b as exactly one JSON object, calling member with each
// member of the top-level object: its name, unescaped, and its raw value,
// a slice of b. A value that is neither object nor array is first decoded
// into what into returns for its name, unless that is nil; an error
// decoding it into that type is no error of walkObject's. It returns an
// invalid_json error unless b is one object with no member name twice in
// any object and only valid Unicode in the top-level names, or what member
// returned when that is not nil.
func walkObject(b []byte, into func(name string) any, member func(name string, raw []byte) error) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errInvalidJSON
	}
	seen := make(map[memberName]struct{}, 16)
	open := []int{0} // the objects (their numbers) and arrays (-1) open, outermost first
	objects := 1
	var name string // the top-level member being read
	var start int   // where its value starts in b
	for len(open) > 0 {
		inObject := open[len(open)-1] >= 0
		if !dec.More() {
			if _, err := dec.Token(); err != nil { // the closing '}' or ']' (Token checks which)
				return errInvalidJSON
			}
			open = open[:len(open)-1]
			if len(open) == 1 {
				if err := member(name, b[start:dec.InputOffset()]); err != nil {
					return err
				}
			}
			continue
		}
		if inObject {
			off := dec.InputOffset()
			t, err := dec.Token()
			s, ok := t.(string)
			if err != nil || !ok {
				return errInvalidJSON
			}
			raw := bytes.TrimLeft(b[off:dec.InputOffset()], " \t\r\n,")
			k := memberName{obj: open[len(open)-1], name: s}
			if !validUnicode(raw) {
				if len(open) == 1 {
					return jsonError("a member name is not valid UTF-8")
				}
				k.name, k.raw = string(raw), true
			}
			if _, dup := seen[k]; dup {
				where := "the body"
				if len(open) > 1 {
					where = "an object in " + quoteName(name)
				}
				return jsonError(where + " has the member " + quoteName(s) + " twice")
			}
			seen[k] = struct{}{}
			if len(open) == 1 {
				name = s
			}
		}
		// A value: where it starts, past the ':' or ',' before it, tells
		// an object or array, walked token by token, from anything else,
		// decoded whole without keeping it. The decoder itself checks
		// the separators.
		at := int(dec.InputOffset())
		for at < len(b) && strings.IndexByte(" \t\r\n:,", b[at]) >= 0 {
			at++
		}
		if len(open) == 1 {
			start = at
		}
		if at < len(b) && (b[at] == '{' || b[at] == '[') {
			if _, err := dec.Token(); err != nil {
				return errInvalidJSON
			}
			if len(open) >= maxJSONDepth {
				return errInvalidJSON
			}
			if b[at] == '{' {
				open = append(open, objects)
				objects++
			} else {
				open = append(open, -1)
			}
			continue
		}
		var dst any = &skipValue{}
		if len(open) == 1 {
			if v := into(name); v != nil {
				dst = v
			}
		}
		if err := dec.Decode(dst); err != nil {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				return errInvalidJSON
			}
		}
		if len(open) == 1 {
			if err := member(name, b[start:dec.InputOffset()]); err != nil {
				return err
			}
		}
	}
	if len(bytes.TrimLeft(b[dec.InputOffset():], " \t\r\n")) > 0 {
		return errInvalidJSON // something after the object
	}
	return nil
}

func jsonError(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_json", Message: msg}
}

// quoteName quotes a member name for an error message, cut short if long.
func quoteName(s string) string {
	const max = 64
	if len(s) > max {
		i := max
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		return strconv.Quote(s[:i] + "…")
	}
	return strconv.Quote(s)
}

// validUnicode reports whether the raw JSON text b is valid UTF-8 with no
// escaped UTF-16 surrogate that is not half of a pair. encoding/json
// decodes either to U+FFFD without a word, so that two different player
// ids cut mid-emoji, "p\ud83d" and "p\ude00", would be stored as the same.
func validUnicode(b []byte) bool {
	return utf8.Valid(b) && !hasLoneSurrogate(b)
}

// hasLoneSurrogate reports whether the raw JSON text b has, in one of its
// strings, a \u escape of a UTF-16 surrogate that is not half of a
// high-low pair. Outside strings JSON has no backslash, so b may be any
// value, or a quoted string alone.
func hasLoneSurrogate(b []byte) bool {
	esc := func(i int) (rune, bool) { // the \uXXXX at b[i:], if it is one
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		r, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(r), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
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

// UnmarshalJSON sets j from a raw JSON value: a string, null (absent), or
// anything else (present, but not a string). It never fails: what is
// wrong with the value is kept in j.bad for validation to report.
func (j *jsonString) UnmarshalJSON(raw []byte) error {
	var s string
	if raw[0] == '"' {
		json.Unmarshal(raw, &s)
	}
	j.fill(raw, s)
	return nil
}

// fill sets j from a raw JSON value and, when that is a string, s, its
// value as encoding/json decodes it.
func (j *jsonString) fill(raw []byte, s string) {
	*j = jsonString{}
	switch {
	case string(raw) == "null":
	case raw[0] != '"':
		j.set, j.bad = true, "must be a string"
	case !utf8.Valid(raw):
		j.set, j.bad = true, "must be valid UTF-8"
	case hasLoneSurrogate(raw):
		j.set, j.bad = true, "must be valid UTF-8 (an escaped surrogate must be half of a pair)"
	default:
		j.set, j.s = true, s
	}
}
