package main

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"deeplink/internal/wire"
)

// metrics serves /metrics for the whole pool: each instance counts the
// requests it served, so the primary serves the request (and counts and
// logs it) and the host adds every worker's counters and histograms to
// its answer (mergeMetrics), and the webhook metrics are the host's
// dispatcher's. An answer other than 200 is sent as it is.
func (h *host) metrics(req []byte) (*wire.Response, error) {
	out, _, err := h.call(0, "handle", req)
	if err != nil {
		return nil, err
	}
	resp, err := wire.ParseResponse(out)
	if err != nil || resp.Status != 200 {
		return resp, err
	}
	bodies := [][]byte{resp.Body}
	for i := 1; i < len(h.slots); i++ {
		b, _, err := h.call(i, "metrics", nil)
		if err != nil {
			return nil, err
		}
		bodies = append(bodies, b)
	}
	resp.Body = h.withHooksMetrics(mergeMetrics(bodies))
	return resp, nil
}

// withHooksMetrics returns text, an exposition of the instances (which
// write no webhook metrics: their copies never send), with the host's
// dispatcher's webhook metrics added.
func (h *host) withHooksMetrics(text []byte) []byte {
	if h.hooks == nil {
		return text
	}
	b := bytes.NewBuffer(text)
	h.hooks.WriteMetrics(b)
	return b.Bytes()
}

// mergeMetrics merges expositions in Prometheus's text format, the
// primary's first: a counter's or histogram's samples are added up
// series by series; a gauge is the first's (every gauge the instances
// export is of the shared state: the store's entries). Families and
// series come in the order first seen.
func mergeMetrics(bodies [][]byte) []byte {
	type family struct {
		head   []string // its # HELP and # TYPE lines
		gauge  bool
		series []string
		value  map[string]float64
	}
	var order []string
	fams := map[string]*family{}
	for _, body := range bodies {
		var cur *family
		for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
			if rest, ok := strings.CutPrefix(line, "# "); ok {
				_, name, _ := strings.Cut(rest, " ") // HELP or TYPE, then the name
				name, typ, _ := strings.Cut(name, " ")
				if fams[name] == nil {
					fams[name] = &family{value: map[string]float64{}}
					order = append(order, name)
				}
				cur = fams[name]
				if len(cur.head) < 2 && !slices.Contains(cur.head, line) {
					cur.head = append(cur.head, line)
				}
				if strings.HasPrefix(rest, "TYPE ") {
					cur.gauge = typ == "gauge"
				}
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if cur == nil || i < 0 {
				continue
			}
			series := line[:i]
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				continue
			}
			old, seen := cur.value[series]
			switch {
			case !seen:
				cur.series = append(cur.series, series)
				cur.value[series] = v
			case !cur.gauge:
				cur.value[series] = old + v
			}
		}
	}
	var b bytes.Buffer
	for _, name := range order {
		f := fams[name]
		for _, l := range f.head {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		for _, s := range f.series {
			b.WriteString(s)
			b.WriteByte(' ')
			b.WriteString(strconv.FormatFloat(f.value[s], 'g', -1, 64))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
