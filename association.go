package main

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"deeplink/internal/config"
	"deeplink/internal/egress"
)

// The association-file check of the dashboard's Settings: the two files of
// API.md §4.5 as the game's host serves them, fetched under the webhook
// egress rules and compared, point by point, with the apps configured.

// maxAssociationFile bounds what the check reads of each file; Apple reads
// at most 128 KB of its own.
const maxAssociationFile = 128 << 10

// assocPoint is one point of the check.
type assocPoint struct {
	OK     bool
	What   string // what was checked, in words
	Detail string // what was found when it is wrong
}

// assocFile is the check of one file.
type assocFile struct {
	Name, URL string
	Skipped   string // why the file was not fetched; "" when it was
	Points    []assocPoint
}

// OK reports whether every point of f holds.
func (f assocFile) OK() bool {
	for _, p := range f.Points {
		if !p.OK {
			return false
		}
	}
	return f.Skipped == ""
}

// checkAssociation fetches the association files from the host of
// gameURL, a store's Game Authorize URL as saved, both at once, and checks
// them against the configured apps.
func (s *server) checkAssociation(ctx context.Context, gameURL string) ([]assocFile, error) {
	game, err := url.Parse(gameURL)
	if err != nil || gameURL == "" {
		return nil, fmt.Errorf("this store has no Game Authorize URL configured")
	}
	// A phone asks over https; with allow_insecure_urls (a test setup),
	// a game app served over plain http is asked as it is served.
	scheme := "https"
	if game.Scheme == "http" && s.cfg.Webhooks.AllowInsecureURLs {
		scheme = "http"
	}
	base := scheme + "://" + game.Host + "/.well-known/"
	apple := assocFile{Name: "apple-app-site-association", URL: base + "apple-app-site-association"}
	android := assocFile{Name: "assetlinks.json", URL: base + "assetlinks.json"}
	if len(s.cfg.Apps.Apple) == 0 {
		apple.Skipped = "no Apple app is configured"
	}
	if len(s.cfg.Apps.Android) == 0 {
		android.Skipped = "no Android app is configured"
	}
	var urls []string
	for _, f := range []*assocFile{&apple, &android} {
		if f.Skipped == "" {
			urls = append(urls, f.URL)
		}
	}
	if len(urls) == 0 {
		return []assocFile{apple, android}, nil
	}
	got, err := s.getFiles(ctx, urls, maxAssociationFile+1)
	if err != nil {
		return nil, err
	}
	if apple.Skipped == "" {
		if v, ok := checkServed(&apple, got[0]); ok {
			checkApple(&apple, v, s.cfg.Apps.Apple, game.Path)
		}
		got = got[1:]
	}
	if android.Skipped == "" {
		if v, ok := checkServed(&android, got[0]); ok {
			checkAndroid(&android, v, s.cfg.Apps.Android)
		}
	}
	return []assocFile{apple, android}, nil
}

// checkServed adds to f the points of how got was served: reachable
// without a redirect, as application/json, and valid JSON, which it
// returns decoded.
func checkServed(f *assocFile, got egress.File) (any, bool) {
	add := func(ok bool, what, detail string) bool {
		f.Points = append(f.Points, assocPoint{OK: ok, What: what, Detail: detail})
		return ok
	}
	switch {
	case got.Err != "" && got.Status == 0:
		return nil, add(false, "reachable", got.Err)
	case got.Status >= 300 && got.Status < 400:
		return nil, add(false, "reachable without a redirect", fmt.Sprintf("answered %d to %s: the apps do not follow redirects", got.Status, got.Location))
	case got.Status != http.StatusOK:
		return nil, add(false, "reachable", fmt.Sprintf("answered %d", got.Status))
	case got.Err != "":
		return nil, add(false, "reachable", got.Err)
	}
	add(true, "reachable without a redirect", "")
	mt, _, _ := mime.ParseMediaType(got.ContentType)
	add(mt == "application/json", "served as application/json", "Content-Type is "+fmt.Sprintf("%q", got.ContentType))
	var v any
	switch {
	case len(got.Body) > maxAssociationFile:
		return nil, add(false, "valid JSON", "larger than 128 KB")
	case json.Unmarshal(got.Body, &v) != nil:
		return nil, add(false, "valid JSON", "the body is not JSON")
	}
	add(true, "valid JSON", "")
	return v, true
}

// appleSiteAssociation is what an apple-app-site-association file says of
// universal links: the classic (appID, paths) and the iOS 13+ (appIDs,
// components) forms.
type appleSiteAssociation struct {
	Applinks struct {
		Details []struct {
			AppID      string           `json:"appID"`
			AppIDs     []string         `json:"appIDs"`
			Paths      []string         `json:"paths"`
			Components []map[string]any `json:"components"`
		} `json:"details"`
	} `json:"applinks"`
}

// checkApple checks the apple-app-site-association v: each configured app
// id, its paths, and that some path of theirs covers the authorize path.
func checkApple(f *assocFile, v any, apps []config.AppleApp, authorize string) {
	var file appleSiteAssociation
	b, _ := json.Marshal(v)
	if json.Unmarshal(b, &file) != nil || file.Applinks.Details == nil {
		f.Points = append(f.Points, assocPoint{What: "holds applinks.details", Detail: "there is no applinks.details list"})
		return
	}
	covered := false
	for _, app := range apps {
		// The app's patterns in the order iOS reads them: the first that
		// matches a path decides, and an excluding one says no.
		type pattern struct {
			path    string
			exclude bool
		}
		var listed []string
		var patterns []pattern
		found := false
		for _, d := range file.Applinks.Details {
			if d.AppID != app.AppID && !slices.Contains(d.AppIDs, app.AppID) {
				continue
			}
			found = true
			for _, p := range d.Paths {
				listed = append(listed, p)
				if rest, ok := strings.CutPrefix(p, "NOT "); ok {
					patterns = append(patterns, pattern{rest, true})
				} else {
					patterns = append(patterns, pattern{p, false})
				}
			}
			for _, c := range d.Components {
				if p, ok := c["/"].(string); ok {
					listed = append(listed, p)
					patterns = append(patterns, pattern{p, c["exclude"] == true})
				}
			}
		}
		f.Points = append(f.Points, assocPoint{OK: found, What: "app " + app.AppID + " is listed", Detail: "no entry of applinks.details names it"})
		if !found {
			continue
		}
		for _, p := range app.Paths {
			f.Points = append(f.Points, assocPoint{OK: slices.Contains(listed, p), What: "path " + p + " is listed for " + app.AppID, Detail: "its entry lists " + strings.Join(listed, ", ")})
		}
		for _, p := range patterns {
			if globMatch(p.path, authorize) {
				covered = covered || !p.exclude
				break
			}
		}
	}
	f.Points = append(f.Points, assocPoint{OK: covered, What: "the authorize path " + authorize + " is covered", Detail: "no path of the configured apps matches it, so iOS opens it in the browser, not the game"})
}

// assetLinks is what an assetlinks.json file says: statements granting
// apps relations to the site.
type assetLinks []struct {
	Relation []string `json:"relation"`
	Target   struct {
		Namespace    string   `json:"namespace"`
		PackageName  string   `json:"package_name"`
		Fingerprints []string `json:"sha256_cert_fingerprints"`
	} `json:"target"`
}

// checkAndroid checks the assetlinks.json v: each configured package with
// the handle_all_urls relation and each of its certificate fingerprints.
func checkAndroid(f *assocFile, v any, apps []config.AndroidApp) {
	var stmts assetLinks
	b, _ := json.Marshal(v)
	if json.Unmarshal(b, &stmts) != nil {
		f.Points = append(f.Points, assocPoint{What: "is a list of statements", Detail: "the file is not a JSON list of statements"})
		return
	}
	for _, app := range apps {
		var prints []string
		found := false
		for _, st := range stmts {
			if st.Target.Namespace == "android_app" && st.Target.PackageName == app.PackageName && slices.Contains(st.Relation, "delegate_permission/common.handle_all_urls") {
				found = true
				prints = append(prints, st.Target.Fingerprints...)
			}
		}
		f.Points = append(f.Points, assocPoint{OK: found, What: "package " + app.PackageName + " may handle all URLs", Detail: "no statement gives it delegate_permission/common.handle_all_urls"})
		if !found {
			continue
		}
		for _, fp := range app.SHA256CertFingerprints {
			ok := slices.ContainsFunc(prints, func(p string) bool { return strings.EqualFold(p, fp) })
			f.Points = append(f.Points, assocPoint{OK: ok, What: "certificate " + fp + " is listed for " + app.PackageName, Detail: "its statements list " + strings.Join(prints, ", ")})
		}
	}
}

// globMatch reports whether s matches the Apple path pattern p, where *
// matches any run of characters (slashes too) and ? any one. The pattern
// comes from a fetched file: the match backtracks to the last * only, so
// it takes O(len(p)·len(s)) whatever the pattern.
func globMatch(p, s string) bool {
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi, si = pi+1, si+1
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			mark++
			pi, si = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
