package plot

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTicks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		lo, hi, step float64
		want         []float64
	}{
		{"from zero", 0, 2, 0.5, []float64{0, 0.5, 1, 1.5, 2}},
		{"inside the range", 0.2, 1.1, 0.5, []float64{0.5, 1}},
		{"a step that is not exact in binary", 0, 0.3, 0.1, []float64{0, 0.1, 0.2, 0.30000000000000004}},
		{"no step", 0, 1, 0, nil},
		{"an infinite range", 0, 1 / zero(), 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Ticks(tc.lo, tc.hi, tc.step)
			require.Equal(t, tc.want, got)
			if len(got) > 0 {
				require.False(t, math.Signbit(got[0]), "a zero tick is labelled 0, not -0")
			}
		})
	}
}

func zero() float64 { return 0 }

func TestLogTicks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lo, hi float64
		want   []float64
	}{
		{"decades", 1, 100, []float64{1, 2, 5, 10, 20, 50, 100}},
		{"widened to the values around", 3, 70, []float64{2, 5, 10, 20, 50, 100}},
		{"below one", 0.1, 0.5, []float64{0.1, 0.2, 0.5}},
		{"one value", 5, 5, []float64{5}},
		{"not positive", 0, 5, nil},
		{"infinite", 1, 1 / zero(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LogTicks(tc.lo, tc.hi)
			require.Len(t, got, len(tc.want))
			for i := range tc.want {
				require.InDelta(t, tc.want[i], got[i], 1e-9*tc.want[i], "tick %d of %v", i, got)
			}
		})
	}
}

func TestAxisPos(t *testing.T) {
	t.Parallel()
	lin := Axis{Min: 0, Max: 10}
	log := Axis{Min: 1, Max: 100, Log: true}
	for _, tc := range []struct {
		name string
		a    Axis
		v    float64
		want float64
	}{
		{"linear, middle", lin, 5, 0.5},
		{"linear, below Min", lin, -1, 0},
		{"linear, beyond Max", lin, 11, 1},
		{"log, middle", log, 10, 0.5},
		{"log, Min", log, 1, 0},
		{"log, below Min", log, 0.5, 0},
		{"log, zero", log, 0, 0},
		{"log, beyond Max", log, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, tc.a.pos(tc.v), 1e-12)
		})
	}
}

// A figure of two panels is a well-formed SVG; its names are escaped; each
// series is named once in the legend; a dot lands where its axes put it.
func TestFigureSVG(t *testing.T) {
	t.Parallel()
	panel := func(title string) Panel {
		return Panel{
			Title:  title,
			XLabel: "seconds since the start",
			YLabel: "wait",
			X:      Axis{Min: 0, Max: 10, Ticks: Ticks(0, 10, 1)},
			Y:      Axis{Min: 1, Max: 100, Log: true, Ticks: LogTicks(1, 100), Format: func(v float64) string { return "≤" + Axis{}.label(v) }},
			Rules:  []Rule{{Y: 10, Label: "one spacing"}},
			Series: []Series{
				{Name: "backfill <lane 0>", Colour: "#1f77b4", Dots: true, Points: []Point{{5, 10}, {0, 0}}},
				{Name: "sends & more", Colour: "#d62728", Points: []Point{{0, 1}, {10, 100}}},
			},
		}
	}
	svg := Figure{Title: `lanes "with" and without`, Panels: []Panel{panel("without lanes"), panel("with lanes")}}.SVG()

	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, svg)
	}
	require.True(t, strings.HasSuffix(svg, "</svg>\n"))
	require.Contains(t, svg, "lanes &#34;with&#34; and without")
	require.Contains(t, svg, "≤100")
	require.Equal(t, 2, strings.Count(svg, ">without lanes<")+strings.Count(svg, ">with lanes<"))
	require.Equal(t, 1, strings.Count(svg, ">backfill &lt;lane 0&gt;<"), "named once, in the legend")
	require.Equal(t, 1, strings.Count(svg, ">sends &amp; more<"), "named once, in the legend")
	// The first panel's plotting area is 730 wide from x 70, and 270 high
	// from y 54: (5, 10) is in its middle; (0, 0) is at its bottom left,
	// zero drawn at the log axis's Min.
	require.Contains(t, svg, `d="M435.0 189.0h0M70.0 324.0h0"`)
	require.Contains(t, svg, `points="70.0,324.0 800.0,54.0"`)
	require.Less(t, strings.Index(svg, "points="), strings.Index(svg, `d="M`), "the first series drawn last, on top")
}

// Legend entries that do not fit side by side go on further rows, and the
// figure grows to hold them.
func TestFigureLegendRows(t *testing.T) {
	t.Parallel()
	height := func(names ...string) string {
		var p Panel
		for _, n := range names {
			p.Series = append(p.Series, Series{Name: n, Colour: "black"})
		}
		svg := Figure{Panels: []Panel{p}}.SVG()
		return svg[:strings.Index(svg, "viewBox")]
	}
	long := strings.Repeat("x", 60)
	// The title's 30, the panel's 24 + 270 + 44, 10 and 18 a row.
	require.Contains(t, height("a", "b"), `height="396"`)
	require.Contains(t, height(long, long+"y", long+"z"), `height="432"`)
}
