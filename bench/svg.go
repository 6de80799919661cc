package main

import (
	"fmt"
	"strings"
	"time"
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
// against the limit: a plain SVG, no dependencies.
func fleetSVG(runs []fleetResult) string {
	const (
		width, height         = 820, 360
		left, right, top, bot = 60, 20, 40, 50
		step                  = 10 * time.Millisecond
	)
	type line struct {
		name, colour string
		counts       []int
	}
	var lines []line
	var span time.Duration
	yMax := fleetN * 3 / 2
	for _, p := range pictured {
		for _, f := range runs {
			if f.load != "saturating" || !strings.HasPrefix(f.name, p.prefix) {
				continue
			}
			c := slidingCounts(f.sends, f.start, f.stop, fleetW, step)
			for _, v := range c {
				yMax = max(yMax, v+fleetN/10)
			}
			span = max(span, f.stop.Sub(f.start))
			lines = append(lines, line{f.name, p.colour, c})
			break
		}
	}
	pw, ph := float64(width-left-right), float64(height-top-bot)
	x := func(i int) float64 { return float64(left) + pw*float64(time.Duration(i)*step)/float64(span) }
	y := func(v int) float64 { return float64(top) + ph*(1-float64(v)/float64(yMax)) }
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="20" font-size="14">Sends per sliding %s window at a strict upstream (limit %d), %d processes × %d workers, saturating</text>`+"\n", left, fleetW, fleetN, fleetProcs, fleetWorkers)
	// axes and grid
	for v := 0; v <= yMax; v += 50 {
		p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left, width-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for s := time.Duration(0); s <= span; s += 500 * time.Millisecond {
		i := int(s / step)
		p(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%.1f</text>`+"\n", x(i), x(i), top, height-bot, x(i), height-bot+16, s.Seconds())
	}
	p(`<text x="%d" y="%d" text-anchor="middle">seconds since the fleet started</text>`+"\n", left+int(pw/2), height-12)
	p(`<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">sends in the last %s</text>`+"\n", top+int(ph/2), top+int(ph/2), fleetW)
	p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6 4"/><text x="%d" y="%.1f" text-anchor="end">limit %d</text>`+"\n", left, width-right, y(fleetN), y(fleetN), width-right-4, y(fleetN)-5, fleetN)
	// Drawn in reverse, so that throttle's line is on top.
	for li := len(lines) - 1; li >= 0; li-- {
		l := lines[li]
		var pts []string
		for i, v := range l.counts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		}
		width := 1.6
		if li == 0 {
			width = 2.4
		}
		p(`<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", l.colour, width, strings.Join(pts, " "))
	}
	for li, l := range lines {
		ly := top + 14 + 16*li
		p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n", left+10, left+30, ly, ly, l.colour, left+36, ly+4, l.name)
	}
	p("</svg>\n")
	return b.String()
}
