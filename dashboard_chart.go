package main

import (
	"deeplink/internal/webhook"
	"fmt"
	"time"
)

// endpointStats is what the deliveries an endpoint was sent in the last
// 24 hours came to, for the dashboard: the totals by outcome, and per
// hour (of the event) for its chart.
type endpointStats struct {
	Succeeded, Failed, Pending int
	Hours                      [24]hourCount // oldest first; the last is the hour now under way
}

type hourCount struct{ Succeeded, Failed, Pending int }

// Total is the deliveries that have ended, succeeded or failed.
func (st endpointStats) Total() int { return st.Succeeded + st.Failed }

// Rate is the share of the ended deliveries that succeeded, 0 without any.
func (st endpointStats) Rate() float64 {
	if st.Total() == 0 {
		return 0
	}
	return float64(st.Succeeded) / float64(st.Total())
}

// statsOf counts the deliveries of the endpoint id made in the 24 hours up
// to now, from its delivery log, by their status.
func statsOf(hk *webhook.Hooks, id string, now time.Time) endpointStats {
	var st endpointStats
	hk.Mu.Lock()
	defer hk.Mu.Unlock()
	e := hk.Endpoints[id]
	if e == nil {
		return st
	}
	end := now.Truncate(time.Hour).Add(time.Hour)
	start := end.Add(-24 * time.Hour)
	for _, d := range e.Log {
		at := time.Unix(d.CreatedAt, 0)
		if at.Before(start) || !at.Before(end) {
			continue
		}
		h := &st.Hours[int(at.Sub(start)/time.Hour)]
		switch d.Status {
		case webhook.StatusSucceeded:
			h.Succeeded++
			st.Succeeded++
		case webhook.StatusFailed:
			h.Failed++
			st.Failed++
		default:
			h.Pending++
			st.Pending++
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

// Bars draws st's hours as stacked bars: succeeded at the bottom, then
// failed, then pending, scaled to the busiest hour.
func (st endpointStats) Bars() []chartBar {
	top := 1
	for _, h := range st.Hours {
		top = max(top, h.Succeeded+h.Failed+h.Pending)
	}
	var bars []chartBar
	for i, h := range st.Hours {
		x := i * chartBarW
		when := fmt.Sprintf("%d h ago", 23-i)
		if i == 23 {
			when = "this hour"
		}
		title := fmt.Sprintf("%s: %d succeeded, %d failed, %d pending", when, h.Succeeded, h.Failed, h.Pending)
		bars = append(bars, chartBar{X: x, Y: 0, W: chartBarW - 2, H: chartH, Class: "slot", Title: title})
		parts := []struct {
			n, h  int
			class string
		}{{h.Succeeded, 0, "ok"}, {h.Failed, 0, "bad"}, {h.Pending, 0, "wait"}}
		sum := 0
		for i := range parts {
			if parts[i].n > 0 {
				parts[i].h = max(parts[i].n*chartH/top, 2) // seen, however small
				sum += parts[i].h
			}
		}
		for sum > chartH { // the floors pushed the stack past the top
			big := 0
			for i := range parts {
				if parts[i].h > parts[big].h {
					big = i
				}
			}
			parts[big].h--
			sum--
		}
		y := chartH
		for _, p := range parts {
			if p.h > 0 {
				y -= p.h
				bars = append(bars, chartBar{X: x, Y: y, W: chartBarW - 2, H: p.h, Class: p.class, Title: title})
			}
		}
	}
	return bars
}

// ChartW is the chart's width.
func (endpointStats) ChartW() int { return 24 * chartBarW }

// ChartH is the chart's height.
func (endpointStats) ChartH() int { return chartH }
