package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"deeplink/internal/store"
)

// HooksFileName is where builds before the store contract kept the whole
// webhook state, one JSON file; ImportHooksFile reads it once.
const HooksFileName = "webhooks.json"

// hooksFile is the whole webhook state as HooksFileName holds it. Its
// Idempotency-Keys hold only the event each published, and until when.
type hooksFile struct {
	Endpoints   []*Endpoint           `json:"endpoints"`
	Events      []*Event              `json:"events"`
	Deliveries  []*Delivery           `json:"deliveries"`
	Idempotency map[string]idemRecord `json:"idempotency"`
}

// The last builds before the store contract wrote HooksFileName whole, as
//
//	{"format":2,"sha256":"<hex>","state":{"endpoints":…,"events":…,…}}
//
// and those before them as the state object alone. The checksum covers
// the state's bytes exactly as written: damage at rest that still parses
// (a bit flipped in a key, a digit, a letter of a secret) stops the
// start, naming the file, instead of importing another state (a renamed
// key would import as nothing at all).
const hooksFormat = 2

var errHooksChecksum = errors.New("checksum does not match: the file was changed or damaged since it was written")

// decodeHooksFile reads the content of HooksFileName, in either form. Its
// errors do not name the file: the caller does.
func decodeHooksFile(b []byte) (hooksFile, error) {
	var f hooksFile
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return f, err
	}
	// The earlier form: the state alone, whose members these are.
	state, known := b, []string{"endpoints", "events", "deliveries", "idempotency"}
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
			return f, errHooksChecksum
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

// ImportHooksFile writes the webhook state an earlier build saved as
// webhooks.json in dir into the store, as the builds after it kept it
// (records and their indexes: Open upgrades them), and then moves the
// file into the directory moved (made if need be).
func (hk *Hooks) ImportHooksFile(ctx context.Context, dir, moved string) error {
	path := filepath.Join(dir, HooksFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	f, err := decodeHooksFile(b)
	if err != nil {
		return fmt.Errorf("importing %s: %w (restore data_dir from a backup, or move the file away to start without webhooks)", path, err)
	}
	var ws []store.Write
	add := func(kind, id string, v any, exp time.Time) {
		b, merr := marshalRecord(v)
		err = errors.Join(err, merr)
		ws = append(ws, store.Write{Key: hookKey(kind, id), Val: b, Exp: exp},
			store.Write{Key: hookIndex(kind), Member: id, Val: member})
	}
	for _, e := range f.Endpoints {
		add(kindEndpoint, e.ID, e, time.Time{})
	}
	for _, ev := range f.Events {
		add(kindEvent, ev.ID, ev, time.Time{})
	}
	for _, d := range f.Deliveries {
		add(kindDelivery, d.ID, d, time.Time{})
	}
	for k, m := range f.Idempotency {
		add(kindIdem, k, m, time.Unix(m.Expires, 0))
	}
	if err == nil {
		err = hk.St.Apply(ctx, ws) // the same records again, should a start cut this short
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	if err := os.MkdirAll(moved, 0o700); err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(moved, HooksFileName))
}
