//go:build !race && !noopenapi && !wasip1

package main

// The contract tests hold every request they make to the service, and its
// answer, to openapi.json: ctService.send calls ctCheckOpenAPI, so that an
// answer that drifts from the document fails the test that got it. The
// deliveries the tests' receivers get are held to the document's webhooks
// the same way (ctCheckWebhookOpenAPI, called by ctReceiver).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/responses"
	"github.com/pb33f/libopenapi/datamodel/high/base"
)

// ctOpenAPI is the validator of openapi.json and its Error schema, made
// once per test binary. The validator is safe for concurrent use.
var ctOpenAPI struct {
	once     sync.Once
	v        validator.Validator
	errorDoc *base.Schema // components.schemas.Error
	err      error
}

// ctOpenAPIValidator returns the validator of the document the binary
// embeds (openAPIDocument).
func ctOpenAPIValidator() (validator.Validator, *base.Schema, error) {
	ctOpenAPI.once.Do(func() {
		doc, err := libopenapi.NewDocument(openAPIDocument)
		if err != nil {
			ctOpenAPI.err = fmt.Errorf("openapi.json: %w", err)
			return
		}
		model, err := doc.BuildV3Model()
		if err != nil {
			ctOpenAPI.err = fmt.Errorf("openapi.json: %w", err)
			return
		}
		ctOpenAPI.errorDoc = model.Model.Components.Schemas.GetOrZero("Error").Schema()
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			ctOpenAPI.err = fmt.Errorf("openapi.json: %w", errors.Join(errs...))
			return
		}
		ctOpenAPI.v = v
	})
	return ctOpenAPI.v, ctOpenAPI.errorDoc, ctOpenAPI.err
}

// ctCheckOpenAPI checks a request the tests sent to the service (method,
// URL and header as sent, with body) and the answer r against
// openapi.json:
//   - a request that no operation has (an unknown path, a method its path
//     lacks) must be answered 404 or 405 with the Error body;
//   - a request the document takes must get an answer its operation
//     documents: status, headers, and a body of the documented schema;
//   - a request the document refuses (the tests send bad JSON, wrong
//     content types, missing keys on purpose) must be refused with a 4xx,
//     or a 503 (a service that takes no changes says so before it reads
//     the body), and that answer too must be one its operation documents.
func ctCheckOpenAPI(method, url string, header http.Header, body []byte, r ctResp) error {
	v, errorSchema, err := ctOpenAPIValidator()
	if err != nil {
		return err
	}
	request := func() *http.Request {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			panic(err) // send made the same request already
		}
		req.Header = header.Clone()
		return req
	}
	response := func(req *http.Request) *http.Response {
		return &http.Response{StatusCode: r.status, Header: r.header, Request: req,
			Body: io.NopCloser(bytes.NewReader(r.body)), ContentLength: int64(len(r.body))}
	}
	req := request()
	respOK, respErrs := v.ValidateHttpResponse(req, response(req))
	if noOperation(respErrs) {
		if r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
			return fmt.Errorf("openapi.json has no operation %s %s, and the service answered %d, not 404 or 405", method, req.URL.Path, r.status)
		}
		if ok, errs := responses.ValidateResponseSchema(&responses.ValidateResponseSchemaInput{
			Request: req, Response: response(req), Schema: errorSchema, Version: 3.1,
		}); !ok {
			return fmt.Errorf("the %d of %s %s (no operation of openapi.json) is not its Error: %s", r.status, method, req.URL.Path, describe(errs))
		}
		return nil
	}
	reqOK, reqErrs := v.ValidateHttpRequestSync(request())
	if !reqOK && (r.status < 400 || r.status > 499) && r.status != http.StatusServiceUnavailable {
		return fmt.Errorf("openapi.json refuses %s %s (%s), yet the service answered %d", method, req.URL.Path, describe(reqErrs), r.status)
	}
	if !respOK {
		return fmt.Errorf("the %d answer to %s %s is not as openapi.json says: %s\nbody: %.2000s", r.status, method, req.URL.Path, describe(respErrs), r.body)
	}
	return nil
}

// noOperation reports whether errs say that the request's path, or its
// method on that path, is not in the document.
func noOperation(errs []*liberrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationSubType == helpers.ValidationMissing && e.ValidationType == helpers.PathValidation ||
			e.ValidationSubType == helpers.ValidationMissingOperation {
			return true
		}
	}
	return false
}

// ctWebhooks is the validator of the requests openapi.json's webhooks
// describe, made once per test binary: the document with each webhook's
// operation also at the path /webhooks/<its name>, as the validator checks
// requests by path.
var ctWebhooks struct {
	once sync.Once
	v    validator.Validator
	err  error
}

// ctCheckWebhookOpenAPI checks a delivery a receiver of the tests got
// (its header and body) against the webhook of openapi.json named by the
// envelope's type.
func ctCheckWebhookOpenAPI(header http.Header, body []byte) error {
	ctWebhooks.once.Do(func() {
		var doc map[string]any
		if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
			ctWebhooks.err = fmt.Errorf("openapi.json: %w", err)
			return
		}
		hooks, _ := doc["webhooks"].(map[string]any)
		paths, _ := doc["paths"].(map[string]any)
		if len(hooks) == 0 || paths == nil {
			ctWebhooks.err = errors.New("openapi.json has no webhooks or no paths")
			return
		}
		for name, item := range hooks {
			paths["/webhooks/"+name] = item
		}
		b, err := json.Marshal(doc)
		if err != nil {
			ctWebhooks.err = err
			return
		}
		d, err := libopenapi.NewDocument(b)
		if err != nil {
			ctWebhooks.err = fmt.Errorf("openapi.json's webhooks: %w", err)
			return
		}
		v, errs := validator.NewValidator(d)
		if len(errs) > 0 {
			ctWebhooks.err = fmt.Errorf("openapi.json's webhooks: %w", errors.Join(errs...))
			return
		}
		ctWebhooks.v = v
	})
	if ctWebhooks.err != nil {
		return ctWebhooks.err
	}
	var env struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Type == "" {
		return fmt.Errorf("a delivery whose body has no type: %.200s", body)
	}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/webhooks/"+url.PathEscape(env.Type), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	if ok, errs := ctWebhooks.v.ValidateHttpRequestSync(req); !ok {
		return fmt.Errorf("a delivery of %s is not as openapi.json's webhook %q says: %s\nbody: %.2000s", env.Type, env.Type, describe(errs), body)
	}
	return nil
}
