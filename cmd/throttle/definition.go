package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// definition settles the rule's definition: the one its processes publish
// when -limit is not given (filling k's limits, algorithm, margin, default
// pace and key kind), else the one given, compared with the published one.
// It returns which it used and the warnings: processes that disagree, a
// given definition that differs from the published one.
func (k *keyFlags) definition(ctx context.Context, st store.Store) (string, []string, error) {
	ps, perr := operator.Published(ctx, st)
	var defs []operator.PublishedRule
	var seen time.Time
	for _, p := range ps {
		for _, r := range p.Rules {
			if r.Name == k.rule {
				defs = append(defs, r)
				if p.Heartbeat.After(seen) {
					seen = p.Heartbeat
				}
			}
		}
	}
	var warnings []string
	for _, d := range defs[min(1, len(defs)):] {
		if !operator.Same(defs[0], d) {
			warnings = append(warnings, fmt.Sprintf("the processes disagree on rule %s: %s and %s (see throttle rules)", k.rule, describe(defs[0]), describe(d)))
			break
		}
	}
	if len(k.limits) == 0 {
		if len(defs) == 0 {
			why := "no running process publishes rule " + k.rule
			if perr != nil && !errors.Is(perr, operator.ErrNoPublished) {
				why = "the published rules could not be read (" + perr.Error() + ")"
			}
			return "", nil, fmt.Errorf("%s: check -rule (throttle rules lists them), or give the rule's -limit (and -alg, -margin, -no-default-pace) to read it anyway", why)
		}
		d := defs[0]
		for _, name := range []string{"alg", "margin", "no-default-pace"} {
			if k.set[name] {
				return "", nil, errFlags{fmt.Sprintf("-%s without -limit: give the whole definition, or none to use the published one", name)}
			}
		}
		k.limits, k.alg, k.margin, k.noPace, k.inFlight = d.Limits, d.Algorithm.String(), d.Margin, d.NoDefaultPace, d.InFlight
		if err := k.keyKind(d); err != nil {
			return "", nil, err
		}
		src := fmt.Sprintf("published by %d process", len(defs))
		if len(defs) > 1 {
			src += "es"
		}
		src += ", last at " + seen.UTC().Format(time.RFC3339)
		if o, ok, err := operator.Limits(ctx, st, k.rule); err == nil && ok {
			// The processes reserve under the override (throttle set).
			k.limits = o.Limits
			src += ", with the override " + limitsText(o.Limits) + " (throttle set " + k.rule + ")"
		}
		return src, warnings, nil
	}
	if o, ok, err := operator.Limits(ctx, st, k.rule); err == nil && ok {
		warnings = append(warnings, fmt.Sprintf("rule %s has the override %s (throttle set %s): the processes reserve under it, not under -limit", k.rule, limitsText(o.Limits), k.rule))
	}
	if len(defs) > 0 {
		given := operator.PublishedRule{Name: k.rule, Limits: k.limits, Margin: k.margin, NoDefaultPace: k.noPace, Key: defs[0].Key,
			KeySecret: defs[0].KeySecret, HashTag: defs[0].HashTag, Also: defs[0].Also}
		if alg, err := parseAlg(k.alg); err == nil {
			given.Algorithm = alg
		}
		if !operator.Same(defs[0], given) {
			warnings = append(warnings, fmt.Sprintf("the processes publish rule %s as %s, not %s as given", k.rule, describe(defs[0]), describe(given)))
		}
		if err := k.keyKind(defs[0]); err != nil {
			return "", nil, err
		}
		k.inFlight = defs[0].InFlight // it does not change the key
	}
	return "given on the command line", warnings, nil
}

// keyKind checks the key flags against how the published rule d keys, and
// takes its key kind for a token when -by is not given.
func (k *keyFlags) keyKind(d operator.PublishedRule) error {
	if d.HashTag != "" {
		return fmt.Errorf("rule %s starts every key with the hash tag of its Also key %s, which only a request gives: its keys cannot be computed from -key or a token", k.rule, d.HashTag)
	}
	if d.KeySecret && k.secretFile == "" {
		return errFlags{fmt.Sprintf("rule %s HMACs its keys (WithKeySecret): give -secret-file", k.rule)}
	}
	if !d.KeySecret && k.secretFile != "" {
		return errFlags{fmt.Sprintf("rule %s has no key secret: drop -secret-file", k.rule)}
	}
	if k.token == "" && k.tokenFile == "" {
		return nil
	}
	fromToken := d.Key == "bearer" || strings.HasPrefix(d.Key, "query:") || strings.HasPrefix(d.Key, "header:")
	switch {
	case d.Key == "":
		return nil // not known yet: -by, or its default
	case !fromToken:
		return errFlags{fmt.Sprintf("rule %s keys by %s, not by a credential: give -key", k.rule, d.Key)}
	case !k.set["by"]:
		k.by = d.Key
	case !strings.EqualFold(k.by, d.Key):
		return errFlags{fmt.Sprintf("rule %s keys by %s, not -by %s", k.rule, d.Key, k.by)}
	}
	return nil
}

// describe is a rule's definition in one phrase.
func describe(r operator.PublishedRule) string {
	ls := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		ls[i] = formatLimit(l)
	}
	s := strings.Join(ls, " ") + " " + r.Algorithm.String() + " margin " + r.Margin.String()
	if r.NoDefaultPace {
		s += " no-default-pace"
	}
	if r.Key != "" {
		s += " key " + r.Key
	}
	if r.KeySecret {
		s += " (secret)"
	}
	if r.HashTag != "" {
		s += " hash tag " + r.HashTag
	}
	for _, a := range r.Also {
		als := make([]string, len(a.Limits))
		for i, l := range a.Limits {
			als[i] = formatLimit(l)
		}
		s += " also " + a.Name + " " + strings.Join(als, " ")
	}
	if r.Shadow {
		s += " shadow (records, enforces nothing)"
	}
	if r.InFlight > 0 {
		s += fmt.Sprintf(" in-flight %d", r.InFlight)
	}
	if r.Override != nil {
		s += ", override " + limitsText(r.Override) + " (throttle set)"
	}
	return s
}

// parseAlg reads -alg.
func parseAlg(s string) (throttle.Algorithm, error) {
	for _, a := range []throttle.Algorithm{throttle.SlidingLog, throttle.FixedWindow, throttle.SlidingCounter, throttle.Buckets} {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q", s)
}
