package main

import (
	"context"
	"deeplink/internal/webhook"
	"fmt"
	"time"
)

// endpointStats is what the deliveries an endpoint was sent in the last
// 24 hours came to, for the dashboard: the totals by outcome, and per
// hour (of the event) for its chart.
type endpointStats struct {
	webhook.Counts
	Hours [24]webhook.Counts // oldest first; the last is the hour now under way
}

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
// to now, from its delivery log, by their status; none when the log
// cannot be read.
func (s *server) statsOf(ctx context.Context, storeID, id string, now time.Time) endpointStats {
	var st endpointStats
	hours, err := s.hooks.LastDay(ctx, storeID, id, now.Truncate(time.Hour).Add(time.Hour))
	if err != nil {
		return st
	}
	st.Hours = hours
	for _, h := range hours {
		st.Succeeded += h.Succeeded
		st.Failed += h.Failed
		st.Pending += h.Pending
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
