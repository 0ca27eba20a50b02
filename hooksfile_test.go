package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"deeplink/internal/store"
	"deeplink/internal/store/embedded"
	"deeplink/internal/webhook"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// savedHooks writes testdata/webhooks-saved-state.json, a small webhook
// state as an earlier build kept it (an endpoint of whStoreA, an event, a
// delivery and an idempotency key), to a new data_dir as webhooks.json,
// in the form of the builds that checksummed it, and returns the
// configuration and the file's path.
func savedHooks(t *testing.T) (whConf, string) {
	t.Helper()
	conf := whFast()
	conf.DataDir = t.TempDir()
	state, err := os.ReadFile("testdata/webhooks-saved-state.json")
	require.NoError(t, err)
	b := fmt.Appendf(nil, `{"format":2,"sha256":"%x","state":%s}`+"\n", sha256.Sum256(state), state)
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
	assert.Contains(t, err.Error(), "checksum does not match")
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
