package main

import (
	"bytes"

	"deeplink/internal/wire"
)

// metrics serves /metrics: the primary answers it (and logs it) with the
// gauges of the shared state, and the host puts before them the requests
// it counted (every instance's) and after them its sender's webhook
// metrics, in the native build's order. An answer other than 200 is sent
// as it is.
func (h *host) metrics(req []byte) (*wire.Response, error) {
	out, _, err := h.call(0, "handle", req)
	if err != nil {
		return nil, err
	}
	resp, err := wire.ParseResponse(out)
	if err != nil || resp.Status != 200 {
		return resp, err
	}
	var b bytes.Buffer
	h.requests.WriteText(&b)
	b.Write(resp.Body)
	if h.hooks != nil {
		h.hooks.WriteMetrics(&b)
	}
	resp.Body = b.Bytes()
	return resp, nil
}
