package examples_test

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/plot"
)

// The fleet tests' pictures of their waits (TestFleetLanes and
// TestFleetTenants, behind the integration tag). Not behind it, so that
// TestWaitsPicture checks them in every run.

// waitLog records each sent request of a fleet run, by series, for its
// picture: when it asked (when its decision came, less its wait) and how
// long it waited. Safe for concurrent use.
type waitLog struct {
	mu    sync.Mutex
	asked map[string][]askedWait
}

type askedWait struct {
	at   time.Time
	wait time.Duration
}

func (l *waitLog) add(series string, d throttle.Decision) {
	if d.Outcome != throttle.Sent {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.asked == nil {
		l.asked = map[string][]askedWait{}
	}
	l.asked[series] = append(l.asked[series], askedWait{now.Add(-d.Delay), d.Delay})
}

// since returns the points of the picture, by series: seconds since start
// against the wait in milliseconds.
func (l *waitLog) since(start time.Time) map[string][]plot.Point {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]plot.Point{}
	for s, ws := range l.asked {
		for _, w := range ws {
			out[s] = append(out[s], plot.Point{X: w.at.Sub(start).Seconds(), Y: float64(w.wait) / float64(time.Millisecond)})
		}
	}
	return out
}

// waitsPicture is a fleet test's picture of each request's wait over time:
// a panel per scenario named in panels (its first run), a colour per series.
// It is written only to the file the environment variable env names.
type waitsPicture struct {
	env, title string
	run        time.Duration
	panels     []string // the scenarios pictured, in order
	series     []waitSeries
	rule       plot.Rule
	points     map[string]map[string][]plot.Point // by scenario, by series
}

// waitSeries is a series of a picture: its key in a waitLog, its label and
// colour, and its dots' size (3 pixels if zero).
type waitSeries struct {
	key, label, colour string
	size               float64
}

// lanesPicture is TestFleetLanes's picture (FLEET_LANES_SVG).
func lanesPicture(run time.Duration) *waitsPicture {
	return &waitsPicture{
		env:    "FLEET_LANES_SVG",
		title:  "Each request's wait: 100/s, 24 backfill workers, one interactive request every 200 ms",
		run:    run,
		panels: []string{"without lanes", "with lanes"},
		series: []waitSeries{
			{"interactive", "interactive (lane 1 with lanes)", "#d62728", 6},
			{"backfill", "backfill (lane 0 with lanes)", "#1f77b4", 0},
		},
		rule: plot.Rule{Y: 10, Label: "one slot spacing (10 ms)"},
	}
}

// tenantsPicture is TestFleetTenants's picture (FLEET_TENANTS_SVG).
func tenantsPicture(run time.Duration) *waitsPicture {
	return &waitsPicture{
		env:    "FLEET_TENANTS_SVG",
		title:  "Each request's wait: 100/s shared by 5 tenants, 3 backlogged and 2 light",
		run:    run,
		panels: []string{"fair shares"},
		series: []waitSeries{
			{"b", "b: weight 1, light", "#d62728", 5},
			{"c", "c: weight 1, light", "#ff7f0e", 5},
			{"e", "e: weight 5, backlogged", "#2ca02c", 0},
			{"d", "d: weight 2, backlogged", "#9467bd", 0},
			{"a", "a: weight 1, backlogged", "#1f77b4", 0},
		},
		rule: plot.Rule{Y: 20, Label: "two slot spacings (20 ms)"},
	}
}

// add keeps the points of a scenario's first run, if it is pictured.
func (p *waitsPicture) add(scenario string, points map[string][]plot.Point) {
	if !slices.Contains(p.panels, scenario) || p.points[scenario] != nil {
		return
	}
	if p.points == nil {
		p.points = map[string]map[string][]plot.Point{}
	}
	p.points[scenario] = points
}

// write draws the picture to the file named by p.env, if it is set.
func (p *waitsPicture) write(t *testing.T) {
	path := os.Getenv(p.env)
	if path == "" {
		return
	}
	var top float64 = 100 // ms
	for _, bySeries := range p.points {
		for _, pts := range bySeries {
			for _, pt := range pts {
				top = max(top, pt.Y)
			}
		}
	}
	ms := func(v float64) string {
		if v >= 1000 {
			return fmt.Sprintf("%g s", v/1000)
		}
		return fmt.Sprintf("%g ms", v)
	}
	secs, ticks := p.run.Seconds(), plot.LogTicks(1, top)
	fig := plot.Figure{Title: p.title}
	for _, scenario := range p.panels {
		if p.points[scenario] == nil {
			continue
		}
		panel := plot.Panel{
			Title:  scenario,
			Height: 240,
			XLabel: "seconds since the run started, when the request asked",
			YLabel: "wait for its slot (under 1 ms at 1 ms)",
			X:      plot.Axis{Max: secs, Ticks: plot.Ticks(0, secs, 1)},
			Y:      plot.Axis{Min: 1, Max: ticks[len(ticks)-1], Log: true, Ticks: ticks, Format: ms},
			Rules:  []plot.Rule{p.rule},
		}
		for _, s := range p.series {
			panel.Series = append(panel.Series, plot.Series{Name: s.label, Colour: s.colour, Dots: true, Width: cmp.Or(s.size, 3), Points: p.points[scenario][s.key]})
		}
		fig.Panels = append(fig.Panels, panel)
	}
	require.NotEmpty(t, fig.Panels, "%s: no scenario pictured ran", p.env)
	require.NoError(t, os.WriteFile(path, []byte(fig.SVG()), 0o644), p.env)
	t.Logf("the waits drawn in %s", path)
}

// A picture keeps the sent requests of the first run of each pictured
// scenario, and is written only when its variable names a file.
func TestWaitsPicture(t *testing.T) {
	var l waitLog
	start := time.Now()
	l.add("interactive", throttle.Decision{Outcome: throttle.Sent, Delay: 7 * time.Millisecond})
	l.add("interactive", throttle.Decision{Outcome: throttle.Limited})
	l.add("backfill", throttle.Decision{Outcome: throttle.Sent, Delay: 2 * time.Second})
	pts := l.since(start)
	require.Len(t, pts["interactive"], 1, "a refused request is not drawn")
	require.Equal(t, 7.0, pts["interactive"][0].Y, "the wait in milliseconds")
	require.Equal(t, 2000.0, pts["backfill"][0].Y)

	path := filepath.Join(t.TempDir(), "lanes.svg")
	t.Setenv("FLEET_LANES_SVG", "")
	p := lanesPicture(3 * time.Second)
	p.add("with lanes", pts)
	p.add("with lanes", map[string][]plot.Point{"backfill": {{X: 1, Y: 1}}}) // a second run
	p.add("with bursts", pts)                                                // not pictured
	p.write(t)                                                               // nothing to do

	t.Setenv("FLEET_LANES_SVG", path)
	p.write(t)
	svg, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(svg), ">with lanes<")
	require.NotContains(t, string(svg), ">without lanes<", "a scenario that did not run")
	require.Contains(t, string(svg), ">2 s<", "the axis reaches the longest wait")
	require.Equal(t, 2, strings.Count(string(svg), "h0"), "a dot per sent request of the first run")

	// The tenants' picture draws a tenant's points, keyed by its name.
	t.Setenv("FLEET_TENANTS_SVG", path)
	p = tenantsPicture(time.Second)
	p.add("fair shares", map[string][]plot.Point{"e": {{X: 0.5, Y: 150}}})
	p.write(t)
	svg, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(svg), ">e: weight 5, backlogged<")
	require.Equal(t, 1, strings.Count(string(svg), "h0"))
}
