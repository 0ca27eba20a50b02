package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"deeplink/internal/webhook"
)

// BenchmarkDashboardPages serves the dashboard's pages for a store with 5
// endpoints and 1 000 deliveries (200 events to each endpoint, pending),
// signed in, through the whole handler: ns/op is the time
// to the page's last byte, which the dashboard writes at once, so it bounds
// the first. It also reports the bytes of the whole dashboard ("total-B":
// the pages as served here, with the style sheet and the script).
func BenchmarkDashboardPages(b *testing.B) {
	cfg := benchConfig(b, 1)
	a, err := openApp(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	hk := a.srv.hooks
	benchAddEndpoints(b, hk, webhook.MaxEndpointsPerStore, "https://shop.example.com/hooks")
	st := cfg.Stores[0]
	for range 200 {
		if _, err := hk.Publish(b.Context(), st.ID, webhook.EventOrderStatus, json.RawMessage(benchOrder), ""); err != nil {
			b.Fatal(err)
		}
	}
	eps, err := hk.StoreEndpoints(b.Context(), st.ID)
	if err != nil {
		b.Fatal(err)
	}
	ep := eps[0]["id"].(string)
	ds, _, err := hk.Deliveries(b.Context(), st.ID, ep, webhook.DeliveryQuery{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}

	h := a.srv.handler()
	form := url.Values{"store_id": {st.ID}, "api_key": {st.APIKeys[0]}}
	r := httptest.NewRequest(http.MethodPost, "/dashboard/sign-in", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	cookies := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(cookies) == 0 {
		b.Fatalf("sign-in: %d", w.Code)
	}

	pages := []struct{ name, path string }{
		{"webhooks", "/dashboard/webhooks"},
		{"deliveries", "/dashboard/webhooks/" + ep + "/deliveries"},
		{"delivery", "/dashboard/webhooks/" + ep + "/deliveries/" + ds[0]["id"].(string)},
		{"settings", "/dashboard/settings"},
	}
	total := 0
	for _, p := range pages {
		total += len(get(b, h, p.path, cookies))
	}
	fs.WalkDir(webFiles, "web/static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			body, _ := fs.ReadFile(webFiles, path)
			total += len(body)
		}
		return nil
	})
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for range b.N {
				get(b, h, p.path, cookies)
			}
			b.ReportMetric(float64(total), "dashboard-total-B")
		})
	}
}

func get(b *testing.B, h http.Handler, path string, cookies []*http.Cookie) []byte {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		b.Fatalf("GET %s: %d", path, w.Code)
	}
	return w.Body.Bytes()
}
