package webhook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDeliveryRecord(t *testing.T) {
	ev := &Event{ID: "evt_1", Type: EventOrderStatus, CreatedAt: 1735689600, Body: json.RawMessage(`{"id":"evt_1","data":{"object":{"note":"<&>"}}}`)}
	tests := []struct {
		name string
		d    *Delivery
	}{
		{"pending, never attempted", &Delivery{ID: "dlv_a", EndpointID: "we_a", EventID: ev.ID, Status: StatusPending,
			CreatedAt: 1735689600, NextAt: 1735689600123456789, StoreID: "s", LoggedAt: 1735689600123456, Event: ev}},
		{"ended, two attempts", &Delivery{ID: "dlv_b", Seq: 7, EndpointID: "we_a", EventID: ev.ID, Status: StatusFailed,
			CreatedAt: 1735689600, Reason: ReasonRetriesUsedUp, StoreID: "s", LoggedAt: 1, Event: ev, Attempts: []Attempt{
				{At: 1735689600123456789, URL: "https://m.example/h", Timestamp: 1735689600, Signature: "t=1,v1=ab", StdSignature: "v1,cd",
					Status: 500, ResponseBody: "no\x00", DurationMS: 12, Error: "the receiver answered 500"},
				{At: -1, Status: 0, Error: "timed out: deadline", DurationMS: 10000},
			}}},
		{"explicit while disabled", &Delivery{ID: "dlv_c", Status: StatusPending, Explicit: true, WhileDisabled: true, Event: ev}},
		{"of an earlier build: no event, no store", &Delivery{ID: "dlv_d", EventID: "evt_x", Status: StatusSucceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := marshalRecord(tt.d)
			if err != nil {
				t.Fatal(err)
			}
			if b[0] != deliveryTag {
				t.Fatalf("record begins with %#x, want the tag", b[0])
			}
			got, err := decodeRecord[Delivery]("k", b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.d) {
				t.Fatalf("read back\n%+v\nwant\n%+v", got, tt.d)
			}
			// The JSON record the builds before wrote reads the same.
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tt.d); err != nil {
				t.Fatal(err)
			}
			j := buf.Bytes()
			old, err := decodeRecord[Delivery]("k", j)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(old, got) {
				t.Fatalf("the JSON record reads\n%+v\nthe binary one\n%+v", old, got)
			}
			// Cut short anywhere, or with a byte more, it is refused.
			for n := range len(b) {
				if _, err := decodeRecord[Delivery]("k", b[:n]); err == nil {
					t.Fatalf("the record cut to %d of %d bytes was read", n, len(b))
				}
			}
			if _, err := decodeRecord[Delivery]("k", append(b, 0)); err == nil {
				t.Fatal("the record with a byte more was read")
			}
		})
	}
}

// FuzzDeliveryRecord: whatever the bytes, parseRecord returns (never
// panics), and what it reads is written back to the same bytes.
func FuzzDeliveryRecord(f *testing.F) {
	d := &Delivery{ID: "dlv_a", Status: StatusPending, Event: &Event{ID: "evt_1", Body: json.RawMessage(`{}`)},
		Attempts: []Attempt{{At: 1, Status: 200}}}
	f.Add(d.appendRecord(nil))
	f.Add([]byte{deliveryTag, 0xff, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Delivery
		if d.parseRecord(b) != nil {
			return
		}
		if again := d.appendRecord(nil); string(again) != string(b) {
			// Varints have one shortest form; a longer one reads the
			// same value and is written shorter.
			var d2 Delivery
			if err := d2.parseRecord(again); err != nil || !reflect.DeepEqual(d, d2) {
				t.Fatalf("%x read as %+v, written back as %x", b, d, again)
			}
		}
	})
}

// TestDeliveryRecordAllocations: a delivery's record, as a publish and an
// attempt write it, is made in one allocation.
func TestDeliveryRecordAllocations(t *testing.T) {
	ev := newEvent(EventOrderStatus, json.RawMessage(`{"id":"ord_1234567890","status":"completed","amount":4999}`), t0)
	d := newDelivery("store_a", NewID("we_"), ev, t0)
	for _, tt := range []struct {
		name     string
		attempts int
	}{{"published", 0}, {"attempted once", 1}, {"attempted three times", 3}} {
		t.Run(tt.name, func(t *testing.T) {
			d.Attempts = nil
			for range tt.attempts {
				d.Attempts = append(d.Attempts, Attempt{At: t0.UnixNano(), URL: "https://merchant.example.com/webhooks/deeplink", Timestamp: t0.Unix(),
					Signature: "t=1765108800,v1=" + strings.Repeat("ab", 32), StdSignature: "v1," + strings.Repeat("A", 44), Status: 200, DurationMS: 21})
			}
			if n := testing.AllocsPerRun(100, func() { d.appendRecord(nil) }); n != 1 {
				t.Errorf("appendRecord with %d attempts made %v allocations; want 1", tt.attempts, n)
			}
		})
	}
}
