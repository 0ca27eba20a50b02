package main

import (
	"bytes"
	"deeplink/internal/webhook"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// validateEventMap is validateEvent as it was before it read data with
// scanObjectIn: data.object decoded into a map, then id and status decoded
// again. FuzzValidateEvent holds validateEvent to its answers.
func validateEventMap(req *publishRequest) (typ string, object json.RawMessage, fields []fieldError) {
	bad := func(f, m string) { fields = append(fields, fieldError{f, m}) }
	if usable("type", req.Type, bad) {
		if json.Unmarshal(req.Type, &typ) != nil {
			bad("type", "must be a string")
		} else if typ != webhook.EventOrderStatus {
			bad("type", "must be a known event type: "+webhook.EventOrderStatus+" ("+webhook.EventTest+" comes only from the test call)")
		}
	} else if absent(req.Type) {
		bad("type", "is required")
	}
	if absent(req.Data) {
		bad("data", "is required")
		return typ, nil, fields
	}
	if !usable("data", req.Data, bad) {
		return typ, nil, fields
	}
	var data struct {
		Object json.RawMessage `json:"object"`
	}
	if decodeObject(req.Data, &data) != nil {
		bad("data", "must be an object")
		return typ, nil, fields
	}
	var obj map[string]json.RawMessage
	if len(data.Object) == 0 || data.Object[0] != '{' || json.Unmarshal(data.Object, &obj) != nil {
		bad("data.object", "must be an object")
		return typ, nil, fields
	}
	if typ == webhook.EventOrderStatus {
		var id, status string
		if json.Unmarshal(obj["id"], &id) != nil || id == "" {
			bad("data.object.id", "must be a non-empty string")
		}
		if json.Unmarshal(obj["status"], &status) != nil || !slices.Contains(orderStatuses, status) {
			bad("data.object.status", "must be one of "+strings.Join(orderStatuses, ", "))
		}
	}
	return typ, data.Object, fields
}

// BenchmarkValidateEvent validates the publish body of a typical order.
func BenchmarkValidateEvent(b *testing.B) {
	req := publishRequest{
		Type: json.RawMessage(`"` + webhook.EventOrderStatus + `"`),
		Data: json.RawMessage(`{"object":` + benchOrder + `}`),
	}
	if _, object, fields := validateEvent(&req); fields != nil || string(object) != benchOrder {
		b.Fatalf("validateEvent(%q) = %q, %v; want %q, no fields", req.Data, object, fields, benchOrder)
	}
	b.ReportAllocs()
	for b.Loop() {
		validateEvent(&req)
	}
}

// FuzzValidateEvent checks validateEvent against validateEventMap on any
// type and data: the same type, object bytes and fields. Seeds are in
// testdata/fuzz/FuzzValidateEvent.
func FuzzValidateEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, typ, data []byte) {
		req := publishRequest{Type: typ, Data: data}
		gotType, gotObject, gotFields := validateEvent(&req)
		wantType, wantObject, wantFields := validateEventMap(&req)
		if gotType != wantType || !bytes.Equal(gotObject, wantObject) || (gotObject == nil) != (wantObject == nil) || !slices.Equal(gotFields, wantFields) {
			t.Fatalf("validateEvent(%q, %q) = %q, %q, %v; want %q, %q, %v", typ, data, gotType, gotObject, gotFields, wantType, wantObject, wantFields)
		}
	})
}

// TestPublishJSONCorners publishes bodies at the corners of JSON through
// the service and checks each answer whole: status, code, message and the
// fields in order; an accepted body's object must reach the receiver as
// sent, white space aside (the event's envelope is compacted).
func TestPublishJSONCorners(t *testing.T) {
	w := whStart(t, whFast())
	rc := whNewReceiver(t, false, nil)
	w.whEndpoint(t, rc.URL)

	const (
		typ       = `"type":"order.status.updated"`
		mustObj   = "must be an object"
		mustID    = "must be a non-empty string"
		mustState = "must be one of pending, completed, archived, canceled, requires_action"
		mustUTF8  = "must be valid UTF-8 (an escaped surrogate must be half of a pair)"
		notOne    = "the body is not one JSON object"
	)
	withObject := func(object string) string { return `{` + typ + `,"data":{"object":` + object + `}}` }
	invalid := func(msg string) errorAnswer { return errorAnswer{http.StatusBadRequest, "invalid_json", msg, nil} }
	fields := func(kv ...string) errorAnswer {
		a := errorAnswer{http.StatusUnprocessableEntity, "validation_failed", "some fields are missing or invalid", nil}
		for i := 0; i < len(kv); i += 2 {
			a.Fields = append(a.Fields, fieldError{kv[i], kv[i+1]})
		}
		return a
	}
	accepted := errorAnswer{Status: http.StatusAccepted}
	// nested is an object nested depth deep in the body: the body, data
	// and the object itself hold three levels, arrays the rest.
	nested := func(depth int) string {
		return `{"id":"o1","status":"pending","deep":` + strings.Repeat("[", depth-3) + strings.Repeat("]", depth-3) + `}`
	}
	long := strings.Repeat("k", 256)

	tests := []struct {
		name string
		body string
		idem string // the Idempotency-Key header, when not empty
		want errorAnswer
	}{
		{"typical order", withObject(benchOrder), "", accepted},
		{"white space everywhere", " \t\r\n{ \"type\" :\t\"order.status.updated\" ,\n\"data\" : { \"object\" : {\r\n \"id\" : \"o1\" , \"status\" : \"pending\" } } } \n", "", accepted},
		{"escaped member names", `{"\u0074ype":"order.status.updated","d\u0061ta":{"\u006fbject":{"\u0069d":"o1","st\u0061tus":"pending"}}}`, "", accepted},
		{"escaped status and id", withObject(`{"id":"\u00e9\ud83d\ude00","status":"p\u0065nding"}`), "", accepted},
		{"escaped type", `{"type":"order.status.upd\u0061ted","data":{"object":{"id":"o1","status":"pending"}}}`, "", accepted},
		{"id of one space", withObject(`{"id":" ","status":"pending"}`), "", accepted},
		{"id an escaped NUL", withObject(`{"id":"\u0000","status":"pending"}`), "", accepted},
		{"id and status nested elsewhere too", withObject(`{"a":{"id":1,"status":[]},"id":"o1","b":[{"status":null}],"status":"pending"}`), "", accepted},
		{"other members of every kind", withObject(`{"n":null,"t":true,"f":false,"x":-1.5e999,"o":{},"a":[[],{}],"id":"o1","status":"pending"}`), "", accepted},
		{"deepest the body may be", withObject(nested(maxJSONDepth)), "", accepted},

		{"id twice", withObject(`{"id":"o1","status":"pending","id":"o2"}`), "", invalid(`an object in "data" has the member "id" twice`)},
		{"status twice, once escaped", withObject(`{"id":"o1","status":"shipped","st\u0061tus":"pending"}`), "", invalid(`an object in "data" has the member "status" twice`)},
		{"object twice", `{` + typ + `,"data":{"object":{"id":"o1","status":"pending"},"object":{}}}`, "", invalid(`an object in "data" has the member "object" twice`)},
		{"a name twice deeper", withObject(`{"id":"o1","status":"pending","items":[{"sku":"a","sku":"b"}]}`), "", invalid(`an object in "data" has the member "sku" twice`)},
		{"a name of invalid UTF-8", withObject("{\"id\":\"o1\",\"status\":\"pending\",\"\xff\":1}"), "", invalid("a member name is not valid UTF-8")},
		{"a name with a lone surrogate", withObject(`{"id":"o1","status":"pending","\udc00":1}`), "", invalid("a member name is not valid UTF-8")},
		{"trailing garbage", withObject(`{"id":"o1","status":"pending"}`) + "x", "", invalid(notOne)},
		{"a second object after", withObject(`{"id":"o1","status":"pending"}`) + "{}", "", invalid(notOne)},
		{"a leading zero in the object", withObject(`{"id":"o1","status":"pending","n":01}`), "", invalid(notOne)},
		{"a raw control character in id", withObject("{\"id\":\"o\t1\",\"status\":\"pending\"}"), "", invalid(notOne)},
		{"nested too deep", withObject(nested(maxJSONDepth + 1)), "", invalid(notOne)},

		{"id empty", withObject(`{"id":"","status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id null", withObject(`{"id":null,"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id a number", withObject(`{"id":17,"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id true", withObject(`{"id":true,"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id an object", withObject(`{"id":{"id":"o1"},"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id an array", withObject(`{"id":["o1"],"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id only nested", withObject(`{"order":{"id":"o1"},"status":"pending"}`), "", fields("data.object.id", mustID)},
		{"ID for id", withObject(`{"ID":"o1","status":"pending"}`), "", fields("data.object.id", mustID)},
		{"id with a NUL after", withObject(`{"id\u0000":"o1","status":"pending"}`), "", fields("data.object.id", mustID)},
		{"status null", withObject(`{"id":"o1","status":null}`), "", fields("data.object.status", mustState)},
		{"status empty", withObject(`{"id":"o1","status":""}`), "", fields("data.object.status", mustState)},
		{"status a number", withObject(`{"id":"o1","status":1}`), "", fields("data.object.status", mustState)},
		{"status an array", withObject(`{"id":"o1","status":["pending"]}`), "", fields("data.object.status", mustState)},
		{"status in capitals", withObject(`{"id":"o1","status":"PENDING"}`), "", fields("data.object.status", mustState)},
		{"status with a space", withObject(`{"id":"o1","status":"pending "}`), "", fields("data.object.status", mustState)},
		{"status with an escaped NUL", withObject(`{"id":"o1","status":"pending\u0000"}`), "", fields("data.object.status", mustState)},
		{"both missing", withObject(`{}`), "", fields("data.object.id", mustID, "data.object.status", mustState)},
		{"both bad, and a long key", withObject(`{"id":"","status":"x"}`), long, fields("data.object.id", mustID, "data.object.status", mustState, "Idempotency-Key", "is longer than 255 characters")},
		{"unknown type: id and status unchecked", `{"type":"order.created","data":{"object":{"id":""}}}`, "", fields("type", "must be a known event type: order.status.updated (webhook.test comes only from the test call)")},
		{"type a number, data.object not an object", `{"type":3,"data":{"object":[]}}`, "", fields("type", "must be a string", "data.object", mustObj)},
		{"object null", withObject(`null`), "", fields("data.object", mustObj)},
		{"object a string", withObject(`"{}"`), "", fields("data.object", mustObj)},
		{"object an array", withObject(`[{"id":"o1","status":"pending"}]`), "", fields("data.object", mustObj)},
		{"object missing", `{` + typ + `,"data":{"Object":{"id":"o1","status":"pending"}}}`, "", fields("data.object", mustObj)},
		{"object escaped wrong", `{` + typ + `,"data":{"\u004fbject":{"id":"o1","status":"pending"}}}`, "", fields("data.object", mustObj)},
		{"data an array", `{` + typ + `,"data":[{"object":{}}]}`, "", fields("data", mustObj)},
		{"data a string", `{` + typ + `,"data":"{}"}`, "", fields("data", mustObj)},
		{"data null", `{` + typ + `,"data":null}`, "", fields("data", "is required")},
		{"invalid UTF-8 in id", withObject("{\"id\":\"o\xff\",\"status\":\"pending\"}"), "", fields("data", mustUTF8)},
		{"invalid UTF-8 in another member", withObject("{\"id\":\"o1\",\"status\":\"pending\",\"note\":\"\xc3\"}"), "", fields("data", mustUTF8)},
		{"a lone surrogate in status", withObject(`{"id":"o1","status":"pending\ud83d"}`), "", fields("data", mustUTF8)},
		{"a lone low surrogate in id, status bad too", withObject(`{"id":"\ude00","status":"x"}`), "", fields("data", mustUTF8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := whReq{method: "POST", path: "/stores/" + whStoreA + "/events", key: whKeyA, body: tc.body}
			if tc.idem != "" {
				q.header = map[string]string{"Idempotency-Key": tc.idem}
			}
			r := w.do(t, q)
			var got struct {
				Error errorAnswer `json:"error"`
			}
			if r.status != http.StatusAccepted {
				if err := json.Unmarshal(r.raw, &got); err != nil {
					t.Fatalf("publish(%q) = %d %s; want %+v", tc.body, r.status, r.raw, tc.want)
				}
			}
			got.Error.Status = r.status
			if !got.Error.equal(tc.want) {
				t.Fatalf("publish(%q) = %+v; want %+v", tc.body, got.Error, tc.want)
			}
			if r.status != http.StatusAccepted {
				return
			}
			var sent struct {
				Data struct {
					Object json.RawMessage `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal([]byte(tc.body), &sent))
			var object bytes.Buffer
			require.NoError(t, json.Compact(&object, sent.Data.Object))
			h := rc.next(t, whWait)
			if want := `"data":{"object":` + object.String() + `}}`; !bytes.HasSuffix(h.body, []byte(want)) {
				t.Errorf("publish(%q) delivered %s; want it to end %s", tc.body, h.body, want)
			}
		})
	}
}

// errorAnswer is an error answer of the service, or a status alone.
type errorAnswer struct {
	Status  int          `json:"-"`
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []fieldError `json:"fields"`
}

func (a errorAnswer) equal(b errorAnswer) bool {
	return a.Status == b.Status && a.Code == b.Code && a.Message == b.Message && slices.Equal(a.Fields, b.Fields)
}
