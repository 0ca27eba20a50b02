package webhook

import (
	"context"
	"slices"
	"testing"
	"time"

	"deeplink/internal/signature"
)

// TestEndpointMemo: a replica whose memo holds an endpoint's decoding
// sees another replica's change of it at its next read (each replica has
// a memo of its own, as processes do), and what a read returns is the
// caller's: changing it changes no later read.
func TestEndpointMemo(t *testing.T) {
	r, _ := openRecords(t)
	ctx := context.Background()
	e := newTestEndpoint()
	if err := r.createEndpoint(ctx, e); err != nil {
		t.Fatal(err)
	}
	key := hookKey(kindEndpoint, e.ID)
	a, b := &recordMemo{limit: 1 << 20}, &recordMemo{limit: 1 << 20}

	changes := []struct {
		name string
		f    func(e *Endpoint)
		want func(e *Endpoint) bool
	}{
		{"disabled", func(e *Endpoint) { e.Enabled = false }, func(e *Endpoint) bool { return !e.Enabled }},
		{"another URL", func(e *Endpoint) { e.URL = "https://other.example.com/" }, func(e *Endpoint) bool { return e.URL == "https://other.example.com/" }},
		{"other events", func(e *Endpoint) { e.Events = []string{EventTest} }, func(e *Endpoint) bool { return slices.Equal(e.Events, []string{EventTest}) }},
		{"secret rotated", func(e *Endpoint) { e.OldSecret, e.Secret = e.Secret, signature.NewSecret() }, func(e *Endpoint) bool { return e.OldSecret != "" }},
	}
	for _, tt := range changes {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := a.read(ctx, r.st, key); err != nil { // a's memo holds the record as it is
				t.Fatal(err)
			}
			// b changes it, as another replica would.
			raw, got, err := b.read(ctx, r.st, key)
			if err != nil {
				t.Fatal(err)
			}
			tt.f(got)
			nb, err := marshalRecord(got)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.st.CompareAndSwap(ctx, key, raw, nb, time.Time{}); err != nil {
				t.Fatal(err)
			}
			_, seen, err := a.read(ctx, r.st, key)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(seen) {
				t.Errorf("a.read(%q) after b's change = %+v; want the change", key, seen)
			}
		})
	}

	t.Run("a read is the caller's", func(t *testing.T) {
		_, first, err := a.read(ctx, r.st, key)
		if err != nil {
			t.Fatal(err)
		}
		url, events := first.URL, slices.Clone(first.Events)
		first.URL, first.Events[0] = "https://changed.example.com/", "changed"
		_, again, err := a.read(ctx, r.st, key)
		if err != nil {
			t.Fatal(err)
		}
		if again.URL != url || !slices.Equal(again.Events, events) {
			t.Errorf("read after changing an earlier read's result = %q %q; want %q %q", again.URL, again.Events, url, events)
		}
	})
}
