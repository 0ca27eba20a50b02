package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// editSavedHooks rewrites the webhook state saved at path with edit
// applied to the state's bytes, under a checksum that matches them: as
// another build, or another configuration, would have saved it.
func editSavedHooks(t *testing.T, path string, edit func(state []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &top))
	state := edit(top["state"])
	sum := sha256.Sum256(state)
	out := hooksFilePrefix + hex.EncodeToString(sum[:]) + `","state":` + string(state) + "}\n"
	require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
}

// savedHooks saves a small state (an endpoint, an event, a delivery and
// an idempotency key) to a new data_dir, and returns its configuration
// and the file's path.
func savedHooks(t *testing.T) (whConf, string) {
	t.Helper()
	conf := whFast()
	conf.DataDir = t.TempDir()
	whSavedWithEvent(t, conf, whStoreA, "key-1")
	return conf, filepath.Join(conf.DataDir, hooksFileName)
}

// savedHooksFile is the content of savedHooks' file.
func savedHooksFile(t *testing.T) []byte {
	t.Helper()
	_, path := savedHooks(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestHooksFileRoundTrip(t *testing.T) {
	b := savedHooksFile(t)
	require.True(t, bytes.HasPrefix(b, []byte(hooksFilePrefix)), "%.60q", b)
	f, err := decodeHooksFile(b)
	require.NoError(t, err)
	require.Len(t, f.Endpoints, 1)
	require.Len(t, f.Events, 1)
	require.Len(t, f.Deliveries, 1)
	require.Len(t, f.Idempotency, 1)
	again, err := encodeHooksFile(&f)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(again), "encode(decode(file))")
}

// TestHooksFileDamage flips each bit of a saved file in turn: every flip
// is refused, or (a hex digit's case in the checksum) reads as the same
// state. Before the checksum, a flip in a member's name loaded as an
// empty member, and one in a secret or a URL as another endpoint.
func TestHooksFileDamage(t *testing.T) {
	b := savedHooksFile(t)
	want, err := decodeHooksFile(b)
	require.NoError(t, err)
	wantEnc, err := encodeHooksFile(&want)
	require.NoError(t, err)
	for bit := range 8 * len(b) {
		d := bytes.Clone(b)
		d[bit/8] ^= 1 << (bit % 8)
		f, err := decodeHooksFile(d)
		if err != nil {
			continue
		}
		enc, err := encodeHooksFile(&f)
		require.NoError(t, err)
		if !bytes.Equal(enc, wantEnc) {
			t.Fatalf("decodeHooksFile with bit %d flipped (byte %d: %q) = another state, no error", bit, bit/8, b[bit/8])
		}
	}
}

func TestHooksFileForms(t *testing.T) {
	b := savedHooksFile(t)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &top))
	state := string(top["state"])
	sum := top["sha256"]
	for _, tt := range []struct {
		name, file string
		err        string // "" for none
		endpoints  int
	}{
		{"current", string(b), "", 1},
		{"earlier build: the state alone", state, "", 1},
		{"earlier build, a member misspelt", strings.Replace(state, `"endpoints"`, `"endpoinTs"`, 1), `unknown member "endpoinTs"`, 0},
		{"earlier build, empty", `{}`, "no endpoints", 0},
		{"null", `null`, "no endpoints", 0},
		{"not an object", `[]`, "cannot unmarshal", 0},
		{"cut short", string(b[:len(b)/2]), "unexpected end", 0},
		{"a newer format", strings.Replace(string(b), `"format":2`, `"format":3`, 1), "format 3", 0},
		{"format misspelt", strings.Replace(string(b), `"format"`, `"formaT"`, 1), `unknown member "formaT"`, 0},
		{"no checksum", `{"format":2,"state":` + state + `}`, "unexpected end", 0},
		{"checksum not hex", `{"format":2,"sha256":"zz","state":` + state + `}`, "checksum does not match", 0},
		{"no state", `{"format":2,"sha256":` + string(sum) + `}`, "checksum does not match", 0},
		{"an extra member", `{"format":2,"sha256":` + string(sum) + `,"state":` + state + `,"x":1}`, `unknown member "x"`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeHooksFile([]byte(tt.file))
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Len(t, f.Endpoints, tt.endpoints)
		})
	}
}

// TestHooksLoadRefusesDamage: a start from a damaged webhooks.json stops
// with an error naming the file, rather than starting without webhooks.
func TestHooksLoadRefusesDamage(t *testing.T) {
	conf, path := savedHooks(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	i := bytes.Index(b, []byte(`"endpoints"`))
	require.Positive(t, i)
	b[i+1] ^= 0x20 // "Endpoints": json would take it as "endpoints"; the checksum does not
	require.NoError(t, os.WriteFile(path, b, 0o600))

	err = newHooks(whParseConfig(t, conf)).load(conf.DataDir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.ErrorIs(t, err, errHooksChecksum)
}

// FuzzHooksFile feeds arbitrary bytes to decodeHooksFile: it never
// panics, and what it reads encodes to a file that reads back the same.
func FuzzHooksFile(f *testing.F) {
	f.Add([]byte(`{"endpoints":null,"events":null,"deliveries":null,"idempotency":null}`))
	f.Add([]byte(`{"format":2,"sha256":"","state":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		hf, err := decodeHooksFile(b)
		if err != nil {
			return
		}
		enc, err := encodeHooksFile(&hf)
		if err != nil {
			t.Fatalf("encodeHooksFile of a decoded state: %v", err)
		}
		again, err := decodeHooksFile(enc)
		if err != nil {
			t.Fatalf("decodeHooksFile(%q) = %v; want no error", enc, err)
		}
		enc2, err := encodeHooksFile(&again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encode(decode(%q)) = %q, %v; want it unchanged", enc, enc2, err)
		}
	})
}

// TestHooksEarlierFormRewritten: a webhooks.json an earlier build wrote
// (the state alone, no checksum) is written again in the current form at
// the next save, without any webhook change: until then damage to it
// would still load unseen.
func TestHooksEarlierFormRewritten(t *testing.T) {
	conf, path := savedHooks(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &top))
	require.NoError(t, os.WriteFile(path, top["state"], 0o600)) // as an earlier build wrote it

	hk := whLoaded(t, conf)
	require.NoError(t, hk.save(conf.DataDir))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(b, []byte(hooksFilePrefix)), "the file after a save: %.40q", b)
	f, err := decodeHooksFile(b)
	require.NoError(t, err)
	assert.Len(t, f.Endpoints, 1)
}

// TestHooksFileRemovedWhileRunning: webhooks.json removed under the
// running service is written again at the next save, with no webhook
// change: otherwise the stop would leave none, and the next start begin
// without webhooks and without a word.
func TestHooksFileRemovedWhileRunning(t *testing.T) {
	conf, path := savedHooks(t)
	hk := whLoaded(t, conf) // a start: the file read
	require.NoError(t, hk.save(conf.DataDir))
	require.NoError(t, os.Remove(path))

	require.NoError(t, hk.save(conf.DataDir))
	require.FileExists(t, path, "after a save with no change")
	assert.Len(t, whLoaded(t, conf).endpoints, 1)
}
