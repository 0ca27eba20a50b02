package main

import (
	"bytes"
	"encoding/json"
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

// decodeObject decodes b, which must be exactly one JSON object (white
// space around it aside), into the struct v points to. A member fills the
// field whose json tag names it exactly, case included: encoding/json
// alone would let "Auth_Code" fill auth_code, and "URL" url. Other members
// are ignored. It returns a 400 invalid_json *apiError saying which rule
// the body breaks, and leaves v zero, when
//   - b is not one JSON object;
//   - an object anywhere in b, nested ones included, has a member name
//     twice (names compared once unescaped): parsers disagree on which of
//     two wins, and an event's data.object reaches merchants as sent;
//   - a member name, at any depth, is not valid Unicode (invalid UTF-8,
//     or an escaped UTF-16 surrogate that is not half of a pair);
//   - a member no field takes holds invalid Unicode anywhere in its value.
//
// A known member's value goes to its field as it is, invalid Unicode
// included: that is the field's to refuse, as a 422 naming it. Fields are
// therefore jsonString, which records why it is unacceptable, or
// json.RawMessage, whose reader checks validUnicode.
func decodeObject(b []byte, v any) error {
	rv := reflect.ValueOf(v).Elem()
	known := fieldsOf(rv.Type())
	var body string // b as a string, made once: string fields are slices of it
	var unused error
	err := scanObject(b, func(name, value []byte, plain bool) {
		if bytes.IndexByte(name, '\\') >= 0 {
			name = []byte(jsonName(name))
		}
		i, ok := known[string(name)]
		if !ok {
			if unused == nil && !plain && !validUnicode(value) {
				unused = jsonError("the member " + quoteName(string(name)) + ", which this request does not use, is not valid UTF-8")
			}
			return
		}
		switch f := rv.Field(i).Addr().Interface().(type) {
		case *jsonString:
			if body == "" {
				body = string(b)
			}
			off := cap(b) - cap(value) // value is a slice of b
			f.assign(value, body[off:off+len(value)], plain)
		case *json.RawMessage:
			*f = append(json.RawMessage(nil), value...) // a copy: b is the caller's buffer
		}
	})
	if err == nil {
		err = unused
	}
	if err != nil {
		rv.SetZero()
	}
	return err
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
	case bytes.IndexByte(raw, '\\') >= 0:
		j.set = true
		json.Unmarshal(raw, &j.s)
	default:
		j.set, j.s = true, rawStr[1:len(rawStr)-1]
	}
}
