package main

import (
	"bytes"
	"crypto/sha256"
	"deeplink/internal/webhook"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// savedState is a small webhook state as an earlier build kept it in
// webhooks.json (an endpoint, an event, a delivery and an idempotency
// key), the state object alone.
const savedState = `{"endpoints":[{"id":"we_saved","store_id":"` + whStoreA + `","url":"https://hooks.example.com/","description":"","events":["order.status.updated"],"enabled":true,"created_at":1764000000,"updated_at":1764000000,"secret":"whsec_MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=","next_seq":1}],` +
	`"events":[{"id":"evt_saved","type":"order.status.updated","created_at":1764000000,"body":{"id":"evt_saved","type":"order.status.updated","created_at":1764000000,"data":{"object":{"id":"o1","status":"pending","note":"<&>"}}}}],` +
	`"deliveries":[{"id":"dlv_saved","seq":0,"endpoint_id":"we_saved","event_id":"evt_saved","status":"pending","created_at":1764000000,"next_at":1764000000000000000,"attempts":[]}],` +
	`"idempotency":{"` + whStoreA + `\u0000key-1":{"event_id":"evt_saved","expires":4102444800}}}`

// savedHooks writes savedState to a new data_dir as webhooks.json, in the
// form of the builds that checksummed it, and returns the configuration
// and the file's path.
func savedHooks(t *testing.T) (whConf, string) {
	t.Helper()
	conf := whFast()
	conf.DataDir = t.TempDir()
	f, err := webhook.DecodeHooksFile([]byte(savedState))
	require.NoError(t, err)
	b, err := encodeHooksFile(&f)
	require.NoError(t, err)
	path := filepath.Join(conf.DataDir, webhook.HooksFileName)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return conf, path
}

// whStore is an embedded store of the test's own, in memory.
func whStore(t *testing.T) store.Store {
	db, err := embedded.Open("", embedded.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// whImported returns the engine of configuration c that imported the
// webhooks.json an earlier build left in c.DataDir into st, as a start
// would.
func whImported(t *testing.T, c whConf, st store.Store) *webhook.Hooks {
	t.Helper()
	hk := webhook.NewHooks(whParseConfig(t, c))
	hk.St = st
	require.NoError(t, hk.ImportHooksFile(t.Context(), c.DataDir, filepath.Join(c.DataDir, legacyMovedDir)))
	require.NoError(t, hk.Open(t.Context()))
	return hk
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
	require.True(t, bytes.HasPrefix(b, []byte(webhook.HooksFilePrefix)), "%.60q", b)
	f, err := webhook.DecodeHooksFile(b)
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
	want, err := webhook.DecodeHooksFile(b)
	require.NoError(t, err)
	wantEnc, err := encodeHooksFile(&want)
	require.NoError(t, err)
	for bit := range 8 * len(b) {
		d := bytes.Clone(b)
		d[bit/8] ^= 1 << (bit % 8)
		f, err := webhook.DecodeHooksFile(d)
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
			f, err := webhook.DecodeHooksFile([]byte(tt.file))
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

	hk := webhook.NewHooks(whParseConfig(t, conf))
	hk.St = whStore(t)
	err = hk.ImportHooksFile(t.Context(), conf.DataDir, filepath.Join(conf.DataDir, legacyMovedDir))
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.ErrorIs(t, err, webhook.ErrHooksChecksum)
}

// FuzzHooksFile feeds arbitrary bytes to decodeHooksFile: it never
// panics, and what it reads encodes to a file that reads back the same.
func FuzzHooksFile(f *testing.F) {
	f.Add([]byte(`{"endpoints":null,"events":null,"deliveries":null,"idempotency":null}`))
	f.Add([]byte(`{"format":2,"sha256":"","state":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		hf, err := webhook.DecodeHooksFile(b)
		if err != nil {
			return
		}
		enc, err := encodeHooksFile(&hf)
		if err != nil {
			t.Fatalf("encodeHooksFile of a decoded state: %v", err)
		}
		again, err := webhook.DecodeHooksFile(enc)
		if err != nil {
			t.Fatalf("decodeHooksFile(%q) = %v; want no error", enc, err)
		}
		enc2, err := encodeHooksFile(&again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encode(decode(%q)) = %q, %v; want it unchanged", enc, enc2, err)
		}
	})
}

// TestHooksEarlierFormImported: a webhooks.json an earlier build wrote,
// in either of its forms, is taken into the store once and moved into
// earlier-build/; the next start reads the store alone.
func TestHooksEarlierFormImported(t *testing.T) {
	for _, stateOnly := range []bool{false, true} {
		conf, path := savedHooks(t)
		if stateOnly { // the form of builds before the checksum
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			var top map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(b, &top))
			require.NoError(t, os.WriteFile(path, top["state"], 0o600))
		}
		st := whStore(t)
		hk := whImported(t, conf, st)
		ctx := t.Context()
		eps, err := hk.StoreEndpoints(ctx, whStoreA)
		require.NoError(t, err)
		require.Len(t, eps, 1, "endpoints imported")
		ds, _, err := hk.Deliveries(ctx, whStoreA, "we_saved", webhook.DeliveryQuery{Limit: 10})
		require.NoError(t, err)
		require.Len(t, ds, 1, "deliveries imported")
		d, err := hk.Delivery(ctx, whStoreA, "we_saved", "dlv_saved")
		require.NoError(t, err)
		assert.Contains(t, d["request_body"], `"note":"<&>"`, "the event's body, byte for byte")
		evt, err := hk.Publish(ctx, whStoreA, webhook.EventOrderStatus, json.RawMessage(`{"id":"o1","status":"pending"}`), "key-1")
		require.NoError(t, err)
		assert.Equal(t, "evt_saved", evt, "the idempotency key imported")
		assert.NoFileExists(t, path)
		assert.FileExists(t, filepath.Join(conf.DataDir, legacyMovedDir, webhook.HooksFileName))
		again := whImported(t, conf, st) // the next start: nothing to import
		eps, err = again.StoreEndpoints(ctx, whStoreA)
		require.NoError(t, err)
		assert.Len(t, eps, 1, "endpoints at the next start")
	}
}

// encodeHooksFile returns f as an earlier build wrote it to hooksFileName. Events'
// bodies are kept byte for byte as delivered (API.md §5.1, "body
// exactly"): json.Marshal would escape <, > and & inside them, and a
// restart would then send and show other bytes.
func encodeHooksFile(f *webhook.HooksFile) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(webhook.HooksFilePrefix)
	sumAt := buf.Len()
	buf.Write(make([]byte, 2*sha256.Size)) // the checksum, once the state is there
	buf.WriteString(`","state":`)
	stateAt := buf.Len()
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	b := buf.Bytes()
	sum := sha256.Sum256(b[stateAt:])
	hex.Encode(b[sumAt:], sum[:])
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}
