package main

import (
	"strings"
	"testing"
	"time"
)

// The fleet picture draws one line per pictured saturating run, throttle's
// on top and first in the legend, and the limit.
func TestFleetSVG(t *testing.T) {
	start := time.Unix(1000, 0)
	var runs []fleetResult
	for i, p := range pictured {
		f := fleetResult{name: p.prefix + " run", load: "saturating", start: start, stop: start.Add(3 * time.Second)}
		for j := range 700 {
			f.sends = append(f.sends, start.Add(time.Duration(j*(4+i))*time.Millisecond))
		}
		runs = append(runs, f, fleetResult{name: p.prefix + " light", load: "light", start: start, stop: f.stop})
	}
	svg := fleetSVG(runs)
	if n := strings.Count(svg, "<polyline"); n != len(pictured) {
		t.Fatalf("%d lines, want %d:\n%s", n, len(pictured), svg)
	}
	if strings.Contains(svg, " light<") {
		t.Fatalf("a light run is drawn:\n%s", svg)
	}
	first := `stroke="` + pictured[0].colour + `" stroke-width="2.4"`
	if !strings.Contains(svg, "limit 200<") || strings.LastIndex(svg, "<polyline") > strings.Index(svg, first) {
		t.Fatalf("no limit, or throttle's line is not drawn last:\n%s", svg)
	}
}
