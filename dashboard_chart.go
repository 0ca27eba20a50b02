package main

import (
	"fmt"
	"net/http"
	"time"
)

// endpointStats is what an endpoint's attempts of the last 24 hours came
// to, for the dashboard: the totals, and per hour for its chart.
type endpointStats struct {
	Succeeded, Failed int
	Hours             [24]hourCount // oldest first; the last is the hour now under way
}

type hourCount struct{ Succeeded, Failed int }

// Total is the attempts counted.
func (st endpointStats) Total() int { return st.Succeeded + st.Failed }

// Rate is the share of the attempts that succeeded, 0 without any.
func (st endpointStats) Rate() float64 {
	if st.Total() == 0 {
		return 0
	}
	return float64(st.Succeeded) / float64(st.Total())
}

// stats counts the attempts of the endpoint id in the 24 hours up to now,
// from its delivery log.
func (hk *hooks) stats(id string, now time.Time) endpointStats {
	var st endpointStats
	hk.mu.Lock()
	defer hk.mu.Unlock()
	e := hk.endpoints[id]
	if e == nil {
		return st
	}
	end := now.Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-24 * time.Hour)
	for _, d := range e.log {
		for i := range d.Attempts {
			a := &d.Attempts[i]
			at := time.Unix(0, a.At)
			if at.Before(start) || !at.Before(end) {
				continue
			}
			h := &st.Hours[int(at.Sub(start)/time.Hour)]
			if a.Status == http.StatusOK && a.Error == "" {
				h.Succeeded++
				st.Succeeded++
			} else {
				h.Failed++
				st.Failed++
			}
		}
	}
	return st
}

// chartBar is one rectangle of an endpoint's chart, in SVG user units.
type chartBar struct {
	X, Y, W, H int
	Class      string
	Title      string
}

// Chart dimensions: 24 bars of chartBarW, chartH tall.
const (
	chartBarW = 10
	chartH    = 48
)

// Bars draws st's hours as stacked bars: succeeded at the bottom, failed
// above, scaled to the busiest hour.
func (st endpointStats) Bars() []chartBar {
	top := 1
	for _, h := range st.Hours {
		top = max(top, h.Succeeded+h.Failed)
	}
	var bars []chartBar
	for i, h := range st.Hours {
		x := i * chartBarW
		title := fmt.Sprintf("%d h ago: %d succeeded, %d failed", 23-i, h.Succeeded, h.Failed)
		if i == 23 {
			title = fmt.Sprintf("this hour: %d succeeded, %d failed", h.Succeeded, h.Failed)
		}
		ok := h.Succeeded * chartH / top
		bad := h.Failed * chartH / top
		if h.Succeeded > 0 {
			ok = max(ok, 2) // seen, however small
		}
		if h.Failed > 0 {
			bad = max(bad, 2)
		}
		bars = append(bars, chartBar{X: x, Y: 0, W: chartBarW - 2, H: chartH, Class: "slot", Title: title})
		if ok > 0 {
			bars = append(bars, chartBar{X: x, Y: chartH - ok, W: chartBarW - 2, H: ok, Class: "ok", Title: title})
		}
		if bad > 0 {
			bars = append(bars, chartBar{X: x, Y: max(0, chartH-ok-bad), W: chartBarW - 2, H: bad, Class: "bad", Title: title})
		}
	}
	return bars
}

// ChartW is the chart's width.
func (endpointStats) ChartW() int { return 24 * chartBarW }

// ChartH is the chart's height.
func (endpointStats) ChartH() int { return chartH }
