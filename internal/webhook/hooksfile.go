package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The webhook state is one JSON file (hooksFileName), written whole:
//
//	{"format":2,"sha256":"<hex>","state":{"endpoints":…,"events":…,…}}
//
// The checksum covers the state's bytes exactly as written. Damage at rest
// that still parses (a bit flipped in a key, a digit, a letter of a secret)
// then stops the start, naming the file, instead of loading as another
// state: a renamed key would load as nothing at all. Files of builds before
// it, the state object alone, are still read, and the next save writes
// them in this form.
const hooksFormat = 2

const HooksFilePrefix = `{"format":2,"sha256":"`

// hooksStateKeys are the members of the state object, the whole file in
// the earlier form.
var hooksStateKeys = []string{"endpoints", "events", "deliveries", "idempotency"}

var ErrHooksChecksum = errors.New("checksum does not match: the file was changed or damaged since it was written")

// decodeHooksFile reads the content of hooksFileName, in either form. Its
// errors do not name the file: the caller does.
func DecodeHooksFile(b []byte) (HooksFile, error) {
	var f HooksFile
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return f, err
	}
	state := b // the earlier form: the state alone
	known := hooksStateKeys
	if format, ok := top["format"]; ok {
		known = []string{"format", "sha256", "state"}
		var n int
		var sum string
		if err := errors.Join(json.Unmarshal(format, &n), json.Unmarshal(top["sha256"], &sum)); err != nil {
			return f, err
		}
		if n != hooksFormat {
			return f, fmt.Errorf("format %d: not one this build reads (%d)", n, hooksFormat)
		}
		state = top["state"]
		want := sha256.Sum256(state)
		if got, err := hex.DecodeString(sum); err != nil || !bytes.Equal(got, want[:]) {
			return f, ErrHooksChecksum
		}
	}
	for _, k := range slices.Sorted(maps.Keys(top)) { // the same error every time
		if !slices.Contains(known, k) {
			return f, fmt.Errorf("unknown member %q", k)
		}
	}
	if top["endpoints"] == nil && top["state"] == nil {
		return f, errors.New("not the webhook state: no endpoints")
	}
	err := json.Unmarshal(state, &f)
	return f, err
}
