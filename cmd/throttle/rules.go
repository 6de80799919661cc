package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/throttle-go/throttle/operator"
)

// cmdRules lists the rules the running processes publish, one line per
// process, then each rule with the definitions the processes give it; it
// warns, and exits 1, when they disagree.
func cmdRules(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("throttle rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	rdb, st, sec, err := c.open()
	if err != nil {
		fmt.Fprintf(stderr, "throttle rules: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()
	ps, err := operator.Published(ctx, st)
	if err != nil {
		fmt.Fprintf(stderr, "throttle rules: %s\n", sec.clean(err))
		return exitFailed
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "no process publishes its rules here (a process publishes at its first request, and for 30 s after its last)")
		return exitOK
	}
	now := time.Now()
	fmt.Fprintf(stdout, "%d processes:\n", len(ps))
	for _, p := range ps {
		names := make([]string, len(p.Rules))
		for i, r := range p.Rules {
			names[i] = r.Name
		}
		fmt.Fprintf(stdout, "  %s  pid %d  %s %s  seen %s ago  rules %s\n", p.Host, p.PID, p.Kind, p.Version,
			human(max(0, now.Sub(p.Heartbeat))), strings.Join(names, ", "))
	}
	// Each rule's definitions, with how many processes give each.
	type def struct {
		r operator.PublishedRule
		n int
	}
	byName := map[string][]*def{}
	for _, p := range ps {
	rules:
		for _, r := range p.Rules {
			for _, d := range byName[r.Name] {
				if operator.Same(d.r, r) && slices.Equal(d.r.Override, r.Override) {
					d.n++
					if d.r.Key == "" {
						d.r.Key = r.Key
					}
					continue rules
				}
			}
			byName[r.Name] = append(byName[r.Name], &def{r: r, n: 1})
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	disagree := false
	fmt.Fprintln(stdout, "rules:")
	for _, n := range names {
		defs := byName[n]
		for _, d := range defs {
			fmt.Fprintf(stdout, "  %s: %s (%d of %d processes)\n", n, describe(d.r), d.n, countWith(ps, n))
		}
		if slices.ContainsFunc(defs, func(d *def) bool { return !operator.Same(defs[0].r, d.r) }) {
			disagree = true
			fmt.Fprintf(stdout, "warn: the processes disagree on rule %s: they count in different logs or against different limits\n", n)
		} else if len(defs) > 1 {
			// The same rule, with and without the override: a process
			// honours it at its next request, and publishes it within 10 s.
			fmt.Fprintf(stdout, "note: not every process of rule %s runs with its override yet (throttle set %s)\n", n, n)
		}
	}
	if disagree {
		return exitFailed
	}
	return exitOK
}

// countWith is the number of processes that run a rule named name.
func countWith(ps []operator.Process, name string) int {
	n := 0
	for _, p := range ps {
		for _, r := range p.Rules {
			if r.Name == name {
				n++
				break
			}
		}
	}
	return n
}
