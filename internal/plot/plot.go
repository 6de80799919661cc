// Package plot draws the pictures of the benchmarks and the fleet tests:
// series of points over time, as lines or dots, in panels stacked one above
// the other, as a plain SVG with no dependencies.
package plot

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Figure is a picture: a title, panels stacked one above the other, and one
// legend below them naming every series once (by name, in the colour of its
// first appearance).
type Figure struct {
	Title  string
	Width  int // pixels; 820 if zero
	Panels []Panel
}

// Panel is one plot of a figure: its axes, the dashed reference lines drawn
// across it and its series, drawn from the last to the first, so that the
// first is on top.
type Panel struct {
	Title          string
	Height         int // of the plotting area in pixels; 270 if zero
	XLabel, YLabel string
	X, Y           Axis
	Rules          []Rule
	Series         []Series
}

// Axis is a panel's axis. Points beyond Min and Max are drawn at them; on a
// logarithmic axis, so are points at or below zero.
type Axis struct {
	Min, Max float64
	Log      bool
	Ticks    []float64            // where grid lines and labels go
	Format   func(float64) string // a tick's label; %g if nil
}

// Rule is a dashed horizontal line across a panel at Y, labelled at its
// right end.
type Rule struct {
	Y     float64
	Label string
}

// Series is a named set of points, drawn as a line joining them in order,
// or as a dot at each (Dots). Width is the line's width or the dots'
// diameter, 1.6 if zero.
type Series struct {
	Name, Colour string
	Points       []Point
	Dots         bool
	Width        float64
}

// Point is a point of a series.
type Point struct{ X, Y float64 }

// Layout, in pixels.
const (
	defaultWidth  = 820
	defaultHeight = 270
	left, right   = 70, 20
	titleHeight   = 30 // the figure's title
	panelTop      = 24 // above a panel's plotting area: its title
	panelBottom   = 44 // below it: tick labels and the x axis's label
	legendRow     = 18
	charWidth     = 7 // a rough width of a character of the legend
)

// Ticks returns the multiples of step from lo to hi (none if step is not
// positive).
func Ticks(lo, hi, step float64) []float64 {
	var out []float64
	if !(step > 0) || math.IsInf(hi-lo, 0) {
		return nil
	}
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+step*1e-9; i++ {
		out = append(out, i*step+0) // +0: no "-0" label
	}
	return out
}

// LogTicks returns the values 1, 2 and 5 times a power of ten, from the
// largest at or below lo to the smallest at or above hi (none unless
// 0 < lo and hi is finite).
func LogTicks(lo, hi float64) []float64 {
	if !(lo > 0) || math.IsInf(hi, 0) || math.IsNaN(hi) {
		return nil
	}
	v := math.Pow(10, math.Floor(math.Log10(lo)))
	for next125(v) <= lo*(1+1e-9) {
		v = next125(v)
	}
	out := []float64{v}
	for v < hi*(1-1e-9) {
		v = next125(v)
		out = append(out, v)
	}
	return out
}

// next125 returns the value after v in the 1, 2, 5 sequence.
func next125(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)+1e-9))
	switch m := math.Round(v / p); m {
	case 1:
		return 2 * p
	case 2:
		return 5 * p
	default:
		return 10 * p
	}
}

// pos returns where v lies between the axis's Min (0) and Max (1), within
// them.
func (a Axis) pos(v float64) float64 {
	var f float64
	if a.Log {
		if v <= 0 {
			return 0
		}
		f = (math.Log(v) - math.Log(a.Min)) / (math.Log(a.Max) - math.Log(a.Min))
	} else {
		f = (v - a.Min) / (a.Max - a.Min)
	}
	return min(max(f, 0), 1)
}

func (a Axis) label(v float64) string {
	if a.Format != nil {
		return a.Format(v)
	}
	return fmt.Sprintf("%g", v)
}

// SVG returns the figure as an SVG document.
func (f Figure) SVG() string {
	width := f.Width
	if width == 0 {
		width = defaultWidth
	}
	type entry struct{ name, colour string }
	var legend []entry
	seen := map[string]bool{}
	for _, p := range f.Panels {
		for _, s := range p.Series {
			if s.Name != "" && !seen[s.Name] {
				seen[s.Name] = true
				legend = append(legend, entry{s.Name, s.Colour})
			}
		}
	}
	// The legend's rows: entries side by side while they fit.
	var rows [][]entry
	x := width
	for _, e := range legend {
		w := 36 + charWidth*len([]rune(e.name)) + 16
		if x+w > width-right || len(rows) == 0 {
			rows = append(rows, nil)
			x = left
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], e)
		x += w
	}

	height := titleHeight + 10 + legendRow*len(rows)
	for _, p := range f.Panels {
		height += panelTop + p.height() + panelBottom
	}
	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pr(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	pr(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	pr(`<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, esc(f.Title))
	top := titleHeight
	for _, p := range f.Panels {
		p.draw(&b, width, top+panelTop)
		top += panelTop + p.height() + panelBottom
	}
	for i, row := range rows {
		y := top + 6 + legendRow*i
		x := left
		for _, e := range row {
			pr(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n", x, x+20, y, y, e.colour, x+26, y+4, esc(e.name))
			x += 36 + charWidth*len([]rune(e.name)) + 16
		}
	}
	pr("</svg>\n")
	return b.String()
}

func (p Panel) height() int {
	if p.Height == 0 {
		return defaultHeight
	}
	return p.Height
}

// draw writes the panel, its plotting area's top at top.
func (p Panel) draw(b *strings.Builder, width, top int) {
	pr := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	h := p.height()
	bottom := top + h
	pw, ph := float64(width-left-right), float64(h)
	x := func(v float64) float64 { return float64(left) + pw*p.X.pos(v) }
	y := func(v float64) float64 { return float64(top) + ph*(1-p.Y.pos(v)) }
	if p.Title != "" {
		pr(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, top-8, esc(p.Title))
	}
	for _, v := range p.Y.Ticks {
		pr(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left, width-right, y(v), y(v), left-6, y(v)+4, esc(p.Y.label(v)))
	}
	for _, v := range p.X.Ticks {
		pr(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(v), x(v), top, bottom, x(v), bottom+16, esc(p.X.label(v)))
	}
	pr(`<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, top, pw, h)
	pr(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", left+int(pw/2), bottom+36, esc(p.XLabel))
	mid := top + h/2
	pr(`<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">%s</text>`+"\n", mid, mid, esc(p.YLabel))
	for _, r := range p.Rules {
		pr(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6 4"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left, width-right, y(r.Y), y(r.Y), width-right-4, y(r.Y)-5, esc(r.Label))
	}
	for i := len(p.Series) - 1; i >= 0; i-- { // the first series on top
		s := p.Series[i]
		w := s.Width
		if w == 0 {
			w = 1.6
		}
		if s.Dots {
			// One path of zero-length round-capped segments: a dot each,
			// a few bytes each.
			var d strings.Builder
			for _, pt := range s.Points {
				fmt.Fprintf(&d, "M%.1f %.1fh0", x(pt.X), y(pt.Y))
			}
			pr(`<path fill="none" stroke="%s" stroke-width="%.1f" stroke-linecap="round" stroke-opacity="0.7" d="%s"/>`+"\n", s.Colour, w, d.String())
			continue
		}
		pts := make([]string, len(s.Points))
		for i, pt := range s.Points {
			pts[i] = fmt.Sprintf("%.1f,%.1f", x(pt.X), y(pt.Y))
		}
		pr(`<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", s.Colour, w, strings.Join(pts, " "))
	}
}

// esc escapes s for an SVG text or attribute.
func esc(s string) string { return html.EscapeString(s) }
