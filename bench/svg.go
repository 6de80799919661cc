package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/throttle-go/throttle/internal/plot"
)

// pictured are the saturating fleet runs drawn in the picture, with colours.
var pictured = []struct{ prefix, colour string }{
	{"throttle (wait, default", "#1f77b4"},
	{kRedisRate + " + ", "#d62728"},
	{kSeed004, "#2ca02c"},
}

// slidingCounts returns, every step from start to stop, the number of sends
// in the window of length w ending then.
func slidingCounts(sends []time.Time, start, stop time.Time, w, step time.Duration) []int {
	var out []int
	lo, hi := 0, 0
	for t := start; !t.After(stop); t = t.Add(step) {
		for hi < len(sends) && !sends[hi].After(t) {
			hi++
		}
		for lo < hi && !sends[lo].After(t.Add(-w)) {
			lo++
		}
		out = append(out, hi-lo)
	}
	return out
}

// fleetSVG draws sends per sliding window over time for the pictured runs
// against the limit.
func fleetSVG(runs []fleetResult) string {
	const step = 10 * time.Millisecond
	var lines []plot.Series
	var span time.Duration
	yMax := fleetN * 3 / 2
	for _, p := range pictured {
		for _, f := range runs {
			if f.load != "saturating" || !strings.HasPrefix(f.name, p.prefix) {
				continue
			}
			l := plot.Series{Name: f.name, Colour: p.colour, Width: 1.6}
			for i, v := range slidingCounts(f.sends, f.start, f.stop, fleetW, step) {
				yMax = max(yMax, v+fleetN/10)
				l.Points = append(l.Points, plot.Point{X: (time.Duration(i) * step).Seconds(), Y: float64(v)})
			}
			span = max(span, f.stop.Sub(f.start))
			lines = append(lines, l)
			break
		}
	}
	if len(lines) > 0 {
		lines[0].Width = 2.4 // throttle's, drawn on top
	}
	return plot.Figure{
		Title: fmt.Sprintf("Sends per sliding %s window at a strict upstream (limit %d), %d processes × %d workers, saturating", fleetW, fleetN, fleetProcs, fleetWorkers),
		Panels: []plot.Panel{{
			XLabel: "seconds since the fleet started",
			YLabel: fmt.Sprintf("sends in the last %s", fleetW),
			X:      plot.Axis{Max: span.Seconds(), Ticks: plot.Ticks(0, span.Seconds(), 0.5), Format: func(v float64) string { return fmt.Sprintf("%.1f", v) }},
			Y:      plot.Axis{Max: float64(yMax), Ticks: plot.Ticks(0, float64(yMax), 50)},
			Rules:  []plot.Rule{{Y: fleetN, Label: fmt.Sprintf("limit %d", fleetN)}},
			Series: lines,
		}},
	}.SVG()
}
