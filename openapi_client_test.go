//go:build !race && !noopenapi && !wasip1

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oapiCodegen is the generator TestOpenAPIClient makes its client with.
const oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"

// oapiCodegenConfig is its configuration. skip-prune keeps the schemas
// only the document's webhooks use (WebhookEnvelope), which the
// generated client names but its pruning would drop.
const oapiCodegenConfig = `package: main
generate:
  models: true
  client: true
output: client.gen.go
output-options:
  skip-prune: true
`

// TestOpenAPIClient generates a Go client from openapi.json with
// oapi-codegen into a module of its own, outside the repository, and runs
// testdata/openapi-client/walk.go with it against the service: a sign-in
// (register, token, me) and a webhook (endpoint, publish, the delivery
// log) that the test's receiver gets.
func TestOpenAPIClient(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	goCmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		return cmd.CombinedOutput()
	}
	if out, err := goCmd("mod", "download", strings.Replace(oapiCodegen, "/cmd/oapi-codegen", "", 1)); err != nil {
		t.Skipf("the Go toolchain cannot fetch oapi-codegen here: %v\n%s", err, out)
	}

	walk, err := os.ReadFile(filepath.Join("testdata", "openapi-client", "walk.go"))
	require.NoError(t, err)
	for name, body := range map[string][]byte{
		"go.mod":       []byte("module walk\n\ngo 1.26\n"),
		"openapi.json": openAPIDocument,
		"config.yaml":  []byte(oapiCodegenConfig),
		"walk.go":      walk,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), body, 0o644))
	}
	for _, args := range [][]string{
		{"run", oapiCodegen, "-config", "config.yaml", "openapi.json"},
		{"mod", "tidy"},
		{"build", "-o", "walk", "."},
	} {
		out, err := goCmd(args...)
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}

	svc := startContractService(t, targetNative, ctOpts{})
	rc := ctNewReceiverOK(t)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "walk"), svc.URL, ctStoreA, ctKeyA, ctShopCB, rc.URL+"/hooks")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "the walk with the generated client: %s", stderr.String())

	var got struct {
		Player     map[string]string `json:"player"`
		EndpointID string            `json:"endpoint_id"`
		Secret     string            `json:"secret"`
		EventID    string            `json:"event_id"`
		Status     int               `json:"response_status"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "the walk's output %s", stdout.String())
	assert.Equal(t, "player-42", got.Player["client_reference_id"], "me's player, through the client")
	assert.Equal(t, "Ada", got.Player["first_name"], "me's player, through the client")
	assert.Equal(t, http.StatusOK, got.Status, "the delivery's attempt, through the client")
	hits := rc.got()
	require.Len(t, hits, 1, "the receiver's requests: one event, published twice with one Idempotency-Key")
	assert.Equal(t, got.EventID, hits[0].header.Get("webhook-id"), "the delivery's webhook-id")
	ctVerifySignature(t, hits[0], got.Secret)
}
