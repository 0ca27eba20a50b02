// The walks of TestOpenAPIClient (openapi_client_test.go), made with the
// client oapi-codegen generates from openapi.json, written beside this
// file in the test's temporary module: a sign-in (register,
// token, me) and a webhook (create an endpoint, publish twice with one
// Idempotency-Key, the delivery log until the delivery succeeds, the
// delivery itself). It prints what the test checks as one JSON object,
// and exits 1 at the first answer that is not as the walk expects.
//
//	go run . BASE_URL STORE_ID API_KEY REDIRECT_URI RECEIVER_URL
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 6 {
		fail("usage: walk BASE_URL STORE_ID API_KEY REDIRECT_URI RECEIVER_URL")
	}
	base, store, key, redirect, receiver := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewClientWithResponses(base)
	must(err)
	withKey := func(_ context.Context, r *http.Request) error { r.Header.Set("X-API-Key", key); return nil }
	var out struct {
		Player     Player `json:"player"`
		EndpointID string `json:"endpoint_id"`
		Secret     string `json:"secret"`
		EventID    string `json:"event_id"`
		DeliveryID string `json:"delivery_id"`
		Status     int    `json:"response_status"`
	}

	// Sign-in: the game backend registers a code, the webshop redeems it
	// with the verifier of its challenge and reads the player.
	code, verifier := random(), random()
	sum := sha256.Sum256([]byte(verifier))
	first := "Ada"
	reg, err := c.RegisterAuthCodeWithResponse(ctx, store, RegisterAuthCodeJSONRequestBody{
		AuthCode: code, RedirectUri: redirect, ClientReferenceId: "player-42",
		CodeChallenge: base64.RawURLEncoding.EncodeToString(sum[:]), State: "walk", FirstName: &first,
	}, withKey)
	must(err)
	expect(reg.JSON200 != nil && reg.JSON200.Data.Status == "ok", "register", reg.HTTPResponse, reg.Body)
	tok, err := c.ExchangeTokenWithFormdataBodyWithResponse(ctx, store, &ExchangeTokenParams{}, ExchangeTokenFormdataRequestBody{
		GrantType: "authorization_code", Code: code, RedirectUri: redirect, CodeVerifier: verifier,
	})
	must(err)
	expect(tok.JSON200 != nil && tok.JSON200.TokenType == "Bearer", "token", tok.HTTPResponse, tok.Body)
	me, err := c.GetMeWithResponse(ctx, store, &GetMeParams{}, func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+tok.JSON200.AccessToken)
		return nil
	})
	must(err)
	expect(me.JSON200 != nil, "me", me.HTTPResponse, me.Body)
	out.Player = me.JSON200.Data.Player

	// Webhooks: an endpoint at the receiver, an event published twice
	// with one Idempotency-Key (one event), its delivery in the log.
	ep, err := c.CreateEndpointWithResponse(ctx, store, CreateEndpointJSONRequestBody{
		Url: receiver, Events: []EndpointCreateEvents{EndpointCreateEventsOrderStatusUpdated},
	}, withKey)
	must(err)
	expect(ep.JSON201 != nil, "create endpoint", ep.HTTPResponse, ep.Body)
	out.EndpointID, out.Secret = ep.JSON201.Data.Id, ep.JSON201.Data.Secret
	idem := "walk-" + random()
	var event PublishEventJSONRequestBody
	event.Type = "order.status.updated"
	event.Data.Object = OrderStatus{Id: "ord_1042", Status: OrderStatusStatusCompleted}
	for i := range 2 {
		pub, err := c.PublishEventWithResponse(ctx, store, &PublishEventParams{IdempotencyKey: &idem}, event, withKey)
		must(err)
		expect(pub.JSON202 != nil && (i == 0 || pub.JSON202.Data.Id == out.EventID), "publish", pub.HTTPResponse, pub.Body)
		out.EventID = pub.JSON202.Data.Id
	}
	status := DeliveryStatusSucceeded
	for {
		log, err := c.ListDeliveriesWithResponse(ctx, store, out.EndpointID, &ListDeliveriesParams{Status: (*ListDeliveriesParamsStatus)(&status)}, withKey)
		must(err)
		expect(log.JSON200 != nil, "deliveries", log.HTTPResponse, log.Body)
		if len(log.JSON200.Data) > 0 {
			d := log.JSON200.Data[0]
			expect(len(log.JSON200.Data) == 1 && d.EventId == out.EventID, "deliveries", log.HTTPResponse, log.Body)
			out.DeliveryID = d.Id
			break
		}
		select { // the log's next look, until the walk's time is up
		case <-ctx.Done():
			fail("no delivery succeeded within a minute")
		case <-time.After(20 * time.Millisecond):
		}
	}
	dlv, err := c.GetDeliveryWithResponse(ctx, store, out.EndpointID, out.DeliveryID, withKey)
	must(err)
	expect(dlv.JSON200 != nil && len(dlv.JSON200.Data.Attempts) == 1, "delivery", dlv.HTTPResponse, dlv.Body)
	out.Status = dlv.JSON200.Data.Attempts[0].ResponseStatus
	must(json.NewEncoder(os.Stdout).Encode(out))
}

// random is 32 random bytes, base64url: a code or a verifier.
func random() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func expect(ok bool, call string, r *http.Response, body []byte) {
	if !ok {
		fail(fmt.Sprintf("%s: %s %s", call, r.Status, body))
	}
}

func must(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}
