package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// cmdSet sets, clears or shows the operator's override of a rule's limits,
// or prints its history:
//
//	throttle set RULE LIMIT... [-for DURATION] [-by WHO]
//	throttle set RULE -clear [-by WHO]
//	throttle set RULE
//	throttle set -history RULE
func cmdSet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("throttle set", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c conn
	c.register(fs)
	var (
		lasting        time.Duration
		by             string
		clear, history bool
	)
	fs.DurationVar(&lasting, "for", 0, "how long the override lasts (default: until -clear)")
	fs.StringVar(&by, "by", "", "who sets it, for the history (default: the OS user and host)")
	fs.BoolVar(&clear, "clear", false, "remove the override: the rule's own limits apply again")
	fs.BoolVar(&history, "history", false, "print the rule's history of overrides")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: throttle set RULE LIMIT... [-for DURATION] [-by WHO]\n       throttle set RULE -clear\n       throttle set RULE          (show the override)\n       throttle set -history RULE\n\nAn override may only tighten: each LIMIT replaces the rule's limit in the same place, with no larger N and no shorter window.\n\n")
		fs.PrintDefaults()
	}
	// Flags may come before or after the rule and the limits.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "throttle set: give the rule's name (throttle rules lists them)")
		return exitUsage
	}
	rule, given := pos[0], pos[1:]
	var ls []throttle.Limit
	for _, s := range given {
		l, err := parseLimit(s)
		if err != nil {
			fmt.Fprintf(stderr, "throttle set: %v\n", err)
			return exitUsage
		}
		ls = append(ls, l)
	}
	switch {
	case (clear || history) && len(ls) > 0:
		fmt.Fprintln(stderr, "throttle set: -clear and -history take no limits")
		return exitUsage
	case clear && history:
		fmt.Fprintln(stderr, "throttle set: -clear or -history, not both")
		return exitUsage
	case lasting < 0 || (lasting > 0 && len(ls) == 0):
		fmt.Fprintln(stderr, "throttle set: -for takes a positive duration, with limits to set")
		return exitUsage
	}
	rdb, st, sec, err := c.open()
	if err != nil {
		fmt.Fprintf(stderr, "throttle set: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "throttle set: %s\n", sec.clean(err))
		if errors.Is(err, operator.ErrRaise) {
			return exitUsage
		}
		return exitFailed
	}
	switch {
	case history:
		h, err := operator.LimitHistory(ctx, st, rule)
		if err != nil {
			return fail(err)
		}
		if len(h) == 0 {
			fmt.Fprintf(stdout, "rule %s: no override was ever set\n", rule)
			return exitOK
		}
		for _, e := range h {
			fmt.Fprintln(stdout, changeLine(e))
		}
		return exitOK
	case clear:
		o, ok, err := operator.Limits(ctx, st, rule)
		if err != nil {
			return fail(err)
		}
		if err := operator.ClearLimits(ctx, st, rule, by); err != nil {
			return fail(err)
		}
		if !ok {
			fmt.Fprintf(stdout, "rule %s had no override; the clearing is recorded\n", rule)
			return exitOK
		}
		fmt.Fprintf(stdout, "rule %s: override %s cleared; every process returns to the rule's own limits at its next request (within a second)\n", rule, limitsText(o.Limits))
		return exitOK
	case len(ls) == 0:
		return showOverride(ctx, stdout, st, rule, fail)
	}
	if err := operator.SetLimits(ctx, st, rule, operator.Override{Limits: ls, For: lasting, By: by}); err != nil {
		return fail(err)
	}
	o, _, err := operator.Limits(ctx, st, rule)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "rule %s: limits %s %s, by %s; every process honours it at its next request (within a second)\n",
		rule, limitsText(o.Limits), untilText(o.Until), o.By)
	return exitOK
}

// showOverride prints the rule's override and which processes honour it.
func showOverride(ctx context.Context, w io.Writer, st store.Store, rule string, fail func(error) int) int {
	o, ok, err := operator.Limits(ctx, st, rule)
	if err != nil {
		return fail(err)
	}
	if !ok {
		fmt.Fprintf(w, "rule %s: no override; the rule's own limits apply\n", rule)
	} else {
		fmt.Fprintf(w, "rule %s: override %s %s, set by %s at %s\n", rule, limitsText(o.Limits), untilText(o.Until), o.By, o.At.UTC().Format(time.RFC3339))
	}
	ps, err := operator.Published(ctx, st)
	if err != nil {
		return exitOK
	}
	n, honour := 0, 0
	for _, p := range ps {
		for _, r := range p.Rules {
			if r.Name != rule {
				continue
			}
			n++
			if ok && slices.Equal(r.Override, o.Limits) || !ok && r.Override == nil {
				honour++
			}
		}
	}
	if n > 0 {
		fmt.Fprintf(w, "%d of %d processes publishing the rule run with it (a process publishes every 10 s)\n", honour, n)
	}
	return exitOK
}

// changeLine is one entry of the history.
func changeLine(e operator.LimitChange) string {
	what := "set"
	if e.Cleared {
		what = "cleared"
	}
	s := fmt.Sprintf("%s  %s by %s: %s -> %s", e.At.UTC().Format(time.RFC3339), what, e.By, limitsText(e.From), limitsText(e.To))
	if !e.Until.IsZero() {
		s += ", until " + e.Until.UTC().Format(time.RFC3339)
	}
	return s
}

func limitsText(ls []throttle.Limit) string {
	if len(ls) == 0 {
		return "(unknown)"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = formatLimit(l)
	}
	return strings.Join(parts, " ")
}

func untilText(until time.Time) string {
	if until.IsZero() {
		return "until cleared"
	}
	return "until " + until.UTC().Format(time.RFC3339) + " (in " + human(time.Until(until)) + ")"
}
