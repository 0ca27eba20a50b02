package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The association-file check of the dashboard's Settings, against a TLS
// server whose CA is the configuration's trusted_ca_file, serving the
// right files and each kind of wrong one.

const (
	assocAppleID = "TEAMID.com.example.game"
	assocPackage = "com.example.game"
	assocPrint   = "AB:CD:EF:01"
)

// assocServer serves the two files as files says (nil: the right ones,
// which the service itself would serve for the same apps).
type assocFiles struct {
	apple, android string // bodies
	status         int    // for both; 200 when 0
	ctype          string // for both; application/json when ""
	redirect       bool   // both answer 301
	plain          bool   // served over http, as the game authorize URL is
}

func startAssocCheck(t *testing.T, f assocFiles) (*app, []assocFile) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.redirect {
			http.Redirect(w, r, "https://www.example.com"+r.URL.Path, http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if f.ctype != "" {
			w.Header().Set("Content-Type", f.ctype)
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
		}
		switch r.URL.Path {
		case "/.well-known/apple-app-site-association":
			io.WriteString(w, f.apple)
		case "/.well-known/assetlinks.json":
			io.WriteString(w, f.android)
		default:
			http.NotFound(w, r)
		}
	}))
	webhooks := map[string]any{"allow_insecure_urls": true}
	if f.plain {
		srv.Start()
	} else {
		srv.StartTLS()
		webhooks["trusted_ca_file"] = whCAFile(t, srv)
	}
	t.Cleanup(srv.Close)
	doc := map[string]any{
		"data_dir": t.TempDir(),
		"webhooks": webhooks,
		"stores": []map[string]any{{"id": whStoreA, "name": "A", "api_keys": []string{whKeyA},
			"game_authorize_url": srv.URL + "/oauth/authorize"}},
		"apps": map[string]any{
			"apple":   []map[string]any{{"app_id": assocAppleID, "paths": []string{"/oauth/*"}}},
			"android": []map[string]any{{"package_name": assocPackage, "sha256_cert_fingerprints": []string{assocPrint}}},
		},
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	cfg, err := ParseConfig(b)
	require.NoError(t, err)
	a, err := openApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	files, err := a.srv.checkAssociation(t.Context(), cfg.Stores[0].GameAuthorizeURL)
	require.NoError(t, err)
	return a, files
}

// wrongPoints lists the points of files that do not hold, as "file: what".
func wrongPoints(files []assocFile) []string {
	var wrong []string
	for _, f := range files {
		for _, p := range f.Points {
			if !p.OK {
				wrong = append(wrong, f.Name+": "+p.What)
			}
		}
	}
	return wrong
}

func TestAssociationCheck(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"stores":[{"id":"` + whStoreA + `","name":"A","api_keys":["` + whKeyA + `"]}],
		"apps":{"apple":[{"app_id":"` + assocAppleID + `","paths":["/oauth/*"]}],
		"android":[{"package_name":"` + assocPackage + `","sha256_cert_fingerprints":["` + assocPrint + `"]}]}}`))
	require.NoError(t, err)
	appleOK, androidOK := associationFiles(cfg.Apps)
	right := assocFiles{apple: string(appleOK), android: string(androidOK)}
	with := func(change func(*assocFiles)) assocFiles {
		f := right
		change(&f)
		return f
	}
	tests := []struct {
		name  string
		files assocFiles
		wrong []string // the points that must fail, in order
	}{
		{"the service's own files", right, nil},
		{"served over http, allow_insecure_urls on", with(func(f *assocFiles) { f.plain = true }), nil},
		{"a redirect", with(func(f *assocFiles) { f.redirect = true }),
			[]string{"apple-app-site-association: reachable without a redirect", "assetlinks.json: reachable without a redirect"}},
		{"not found", with(func(f *assocFiles) { f.status = http.StatusNotFound }),
			[]string{"apple-app-site-association: reachable", "assetlinks.json: reachable"}},
		{"served as text", with(func(f *assocFiles) { f.ctype = "text/plain" }),
			[]string{"apple-app-site-association: served as application/json", "assetlinks.json: served as application/json"}},
		{"not JSON", with(func(f *assocFiles) { f.apple, f.android = "{", "<html>" }),
			[]string{"apple-app-site-association: valid JSON", "assetlinks.json: valid JSON"}},
		{"another app", with(func(f *assocFiles) {
			f.apple = `{"applinks":{"details":[{"appID":"OTHER.app","paths":["/oauth/*"]}]}}`
			f.android = `[{"relation":["delegate_permission/common.handle_all_urls"],"target":{"namespace":"android_app","package_name":"other.app","sha256_cert_fingerprints":["` + assocPrint + `"]}}]`
		}), []string{"apple-app-site-association: app " + assocAppleID + " is listed",
			"apple-app-site-association: the authorize path /oauth/authorize is covered",
			"assetlinks.json: package " + assocPackage + " may handle all URLs"}},
		{"paths that miss the authorize path", with(func(f *assocFiles) {
			f.apple = `{"applinks":{"details":[{"appIDs":["` + assocAppleID + `"],"components":[{"/":"/shop/*"}]}]}}`
		}), []string{"apple-app-site-association: path /oauth/* is listed for " + assocAppleID,
			"apple-app-site-association: the authorize path /oauth/authorize is covered"}},
		{"another certificate", with(func(f *assocFiles) {
			f.android = `[{"relation":["delegate_permission/common.handle_all_urls"],"target":{"namespace":"android_app","package_name":"` + assocPackage + `","sha256_cert_fingerprints":["00:11"]}}]`
		}), []string{"assetlinks.json: certificate " + assocPrint + " is listed for " + assocPackage}},
		{"components with every kind of key", with(func(f *assocFiles) {
			f.apple = `{"applinks":{"details":[{"appIDs":["` + assocAppleID + `"],"components":[{"/":"/oauth/*","caseSensitive":false,"?":{"x":"y"},"comment":"c"}]}]}}`
		}), nil},
		{"an exclusion first", with(func(f *assocFiles) {
			f.apple = `{"applinks":{"details":[{"appIDs":["` + assocAppleID + `"],"components":[{"/":"/oauth/authorize","exclude":true},{"/":"/oauth/*"}]}]}}`
		}), []string{"apple-app-site-association: the authorize path /oauth/authorize is covered"}},
		{"NOT first, in the classic form", with(func(f *assocFiles) {
			f.apple = `{"applinks":{"details":[{"appID":"` + assocAppleID + `","paths":["NOT /oauth/authorize","/oauth/*"]}]}}`
		}), []string{"apple-app-site-association: the authorize path /oauth/authorize is covered"}},
		{"no applinks", with(func(f *assocFiles) { f.apple = `{"webcredentials":{}}` }),
			[]string{"apple-app-site-association: holds applinks.details"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, files := startAssocCheck(t, tc.files)
			assert.Equal(t, tc.wrong, wrongPoints(files), "the points that fail")
		})
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"/oauth/*", "/oauth/authorize", true},
		{"/oauth/*", "/oauth", false},
		{"*", "/anything/at/all", true},
		{"/o?uth/authorize", "/oauth/authorize", true},
		{"/oauth/authorize", "/oauth/authorize/", false},
		{"/*/authorize", "/a/b/authorize", true},
		{strings.Repeat("*a", 500) + "b", strings.Repeat("a", 200), false}, // no blow-up
	}
	for _, tc := range tests {
		if got := globMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("globMatch(%.20q, %q) = %v; want %v", tc.p, tc.s, got, tc.want)
		}
	}
}

// TestDashboardAssociationCheck: the Settings page's button, through the
// mux, reports each point.
func TestDashboardAssociationCheck(t *testing.T) {
	a, _ := startAssocCheck(t, assocFiles{apple: "{", android: "[]"})
	srv := httptestServer(t, a)
	d := newDashClient(t, srv.URL)
	require.Equal(t, http.StatusOK, d.signIn(whStoreA, whKeyA).status)
	d.get("/dashboard/settings")
	p := d.post("/dashboard/settings/check", nil)
	require.Equal(t, http.StatusOK, p.status)
	assert.Contains(t, p.body, "apple-app-site-association")
	assert.Equal(t, 2, strings.Count(p.body, `class="fail"`), "valid JSON (Apple) and the package (Android)")
	assert.Equal(t, 5, strings.Count(p.body, `class="pass"`), "reachable and application/json twice, valid JSON once")
}
