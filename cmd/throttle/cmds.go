package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/operator"
)

// open parses the key flags of a command and connects: the target and the
// store, or an exit code.
func open(ctx context.Context, name string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (*target, contract.Admin, func(), int) {
	fs := flag.NewFlagSet("throttle "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var k keyFlags
	k.register(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, nil, exitOK
		}
		return nil, nil, nil, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "throttle %s: unexpected arguments %q\n", name, fs.Args())
		return nil, nil, nil, exitUsage
	}
	k.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { k.set[f.Name] = true })
	rdb, st, sec, err := k.open()
	if err != nil {
		fmt.Fprintf(stderr, "throttle %s: %v\n", name, err)
		return nil, nil, nil, exitUsage
	}
	t, err := k.resolve(ctx, st, sec)
	if err != nil {
		_ = rdb.Close()
		fmt.Fprintf(stderr, "throttle %s: %s\n", name, sec.clean(err))
		var bad errFlags
		if errors.As(err, &bad) {
			return nil, nil, nil, exitUsage
		}
		return nil, nil, nil, exitFailed
	}
	t.exists = func(ctx context.Context) (bool, error) {
		n, err := rdb.Exists(ctx, st.Keys(t.skey)...).Result()
		return n > 0, err
	}
	t.lost = func(ctx context.Context) bool {
		n, err := rdb.Exists(ctx, st.SeenKey(t.skey)).Result()
		return err == nil && n > 0
	}
	return t, st, func() { _ = rdb.Close() }, -1
}

// header prints which definition of the rule t uses, and its warnings.
func header(w io.Writer, t *target) {
	fmt.Fprintf(w, "definition: %s\n", t.source)
	for _, m := range t.warnings {
		fmt.Fprintf(w, "warn: %s\n", m)
	}
}

// noState is what usage, watch and reset say when nothing is stored under
// the key they computed.
func noState(t *target) string {
	return fmt.Sprintf("no state under %s: nothing is stored for this key (a wrong -rule, -key, -by or -secret-file gives another key; throttle rules shows the rules)", t.redis)
}

// lostState is what usage says of a log deleted (a reset) or lost while
// the fleet ran: only its seen mark is left.
func lostState(t *target) string {
	return fmt.Sprintf("the log under %s was reset or lost while the fleet ran: the upstream still counts what was sent, so its next reservation waits out one window of each limit", t.redis)
}

func cmdUsage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	t, _, done, code := open(ctx, "usage", args, stderr, nil)
	if code >= 0 {
		return code
	}
	defer done()
	u, err := operator.Usage(ctx, t.tr, t.rule, t.rateKey)
	if err != nil {
		fmt.Fprintf(stderr, "throttle usage: %s\n", t.secrets.clean(err))
		return exitFailed
	}
	header(stdout, t)
	if ok, err := t.exists(ctx); err == nil && !ok {
		if t.lost(ctx) {
			fmt.Fprintln(stdout, lostState(t))
			return exitOK
		}
		fmt.Fprintln(stdout, noState(t))
		return exitFailed
	}
	writeUsage(stdout, t, u)
	return exitOK
}

func cmdWatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var every, total time.Duration
	t, _, done, code := open(ctx, "watch", args, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&every, "every", time.Second, "how often to print a line")
		fs.DurationVar(&total, "for", 0, "stop after this long (0: until interrupted)")
	})
	if code >= 0 {
		return code
	}
	defer done()
	if every <= 0 {
		fmt.Fprintln(stderr, "throttle watch: -every must be positive")
		return exitUsage
	}
	// -for bounds the loop, not the calls: the first line is always
	// printed, however slow the server.
	var end <-chan time.Time
	if total > 0 {
		end = time.After(total)
	}
	header(stdout, t)
	fmt.Fprintf(stdout, "watching %s every %s\n", t.redis, every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		u, err := operator.Usage(ctx, t.tr, t.rule, t.rateKey)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK // interrupted
			}
			fmt.Fprintf(stderr, "throttle watch: %s\n", t.secrets.clean(err))
			return exitFailed
		}
		line := watchLine(time.Now(), t, u)
		if ok, err := t.exists(ctx); err == nil && !ok {
			line += "  (no state under this key)"
		}
		fmt.Fprintln(stdout, line)
		select {
		case <-ctx.Done():
			return exitOK
		case <-end:
			return exitOK
		case <-tick.C:
		}
	}
}

func cmdReset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var yes, feedback bool
	t, st, done, code := open(ctx, "reset", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
		fs.BoolVar(&feedback, "feedback", false, "delete only what the upstream said (pause, learned limit, pace or margin, budget); the sends stay counted")
	})
	if code >= 0 {
		return code
	}
	defer done()
	header(stdout, t)
	if ok, err := t.exists(ctx); err == nil && !ok {
		fmt.Fprintln(stdout, noState(t)+"; nothing deleted")
		return exitFailed
	}
	keys, what := st.Keys(t.skey), resetSays
	if feedback {
		keys, what = slices.DeleteFunc(keys, func(k string) bool { return !strings.HasSuffix(k, ":p") }), feedbackSays
	}
	if !yes {
		fmt.Fprintf(stdout, "delete %s (%s)? %s [y/N] ", strings.Join(keys, ", "), t.shown(), what)
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(stdout, "not deleted")
			return exitFailed
		}
	}
	del := st.Delete
	if feedback {
		del = st.DeleteFeedback
	}
	n, err := del(ctx, t.skey)
	if err != nil {
		fmt.Fprintf(stderr, "throttle reset: %s\n", t.secrets.clean(err))
		return exitFailed
	}
	switch {
	case n == 0 && feedback:
		fmt.Fprintln(stdout, "nothing the upstream said is stored under this key; nothing deleted")
		return exitOK
	case n == 0:
		fmt.Fprintln(stdout, noState(t)+"; nothing deleted")
		return exitFailed
	}
	fmt.Fprintf(stdout, "deleted %d Redis keys of %s. %s\n", n, t.redis, what)
	return exitOK
}

// What reset says of its effect, asking and done.
const (
	resetSays = "The upstream still counts what was sent: a sliding log waits out one window " +
		"before it sends again (the other algorithms start afresh). To lift only a pause, use -feedback."
	feedbackSays = "Pauses, learned limits, paces and margins, and budgets go; the sends stay counted."
)

// writeUsage prints a Usage as a small table and a few lines.
func writeUsage(w io.Writer, t *target, u operator.KeyUsage) {
	fmt.Fprintf(w, "rule %s, key %s, algorithm %s\n", t.rule, t.shown(), u.Algorithm)
	fmt.Fprintf(w, "redis key %s\n", t.redis)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	prev := u.Algorithm == throttle.SlidingCounter
	head := "limit\twindow\tused\treserved\t"
	if prev {
		head += "previous\t"
	}
	fmt.Fprintln(tw, head)
	for i, l := range u.Limits {
		given := l.Limit
		if i < len(t.limits) {
			given = t.limits[i]
		}
		row := fmt.Sprintf("%s\t%s\t%d/%d\t%d\t", rowName(t, i, given), shortDuration(l.Limit.Per), l.Used, capacity(l.Limit), l.Reserved)
		if prev {
			row += fmt.Sprintf("%d\t", l.Previous)
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "next free slot: %s\n", nextText(t, u))
	if u.Algorithm == throttle.SlidingLog && u.Entries > 0 && u.Last > 0 {
		fmt.Fprintf(w, "queue: the newest reservation is %s ahead\n", human(u.Last))
	}
	if u.InFlight > 0 {
		fmt.Fprintf(w, "in flight: %s\n", inFlightText(u))
	}
	fmt.Fprintf(w, "pause: %s\n", until(u.Pause))
	if u.Learned.N > 0 {
		fmt.Fprintf(w, "learned limit: %s for %s\n", formatLimit(u.Learned), human(u.LearnedFor))
	} else {
		fmt.Fprintln(w, "learned limit: none")
	}
	if p := u.LearnedPace; p.N > 0 {
		fmt.Fprintf(w, "learned pace: one per %s, %d more at once, for %s; %s\n", human(p.Per), p.Burst, human(u.LearnedPaceFor), paceText(u))
	}
	if u.LearnedMargin > 0 {
		fmt.Fprintf(w, "learned margin: windows %s wider than the rule's, for %s; last widened or narrowed %s ago\n",
			human(u.LearnedMargin), human(u.LearnedMarginFor), human(u.LearnedMarginChanged))
	}
	if u.BudgetReset > 0 {
		fmt.Fprintf(w, "budget: %d left until the reset in %s\n", u.Budget, human(u.BudgetReset))
	} else {
		fmt.Fprintln(w, "budget: none")
	}
}

// paceText says how the learned pace stands against the rule's own (the
// spacing of its paced limit, the default pace included, else of its
// shortest window: the pace a 429 despite compliance moves a key to), and
// what last changed it.
func paceText(u operator.KeyUsage) string {
	var s string
	// The store keeps spacings in whole microseconds.
	switch own := ruleSpacing(u); {
	case own <= 0:
	case u.LearnedPace.Per > own+time.Microsecond:
		s = fmt.Sprintf("%.0f%% slower than the rule's rate", 100*float64(u.LearnedPace.Per-own)/float64(own))
	case u.LearnedPace.Per >= own-time.Microsecond:
		s = "at the rule's rate"
	default:
		s = "faster than the rule's rate"
	}
	if s != "" {
		s += "; "
	}
	switch {
	case u.PaceProbed && u.LearnedPaceProbed == u.LearnedPaceChanged:
		return s + "last sped up by a probe " + human(u.LearnedPaceProbed) + " ago"
	case u.PaceProbed:
		return s + "last set or slowed " + human(u.LearnedPaceChanged) + " ago, sped up by a probe " + human(u.LearnedPaceProbed) + " ago"
	}
	return s + "last set or slowed " + human(u.LearnedPaceChanged) + " ago, not sped up since"
}

// ruleSpacing is the spacing of the pace a key of the rule moves to: its
// paced limit's (the default pace's), else its shortest window's; 0 if it
// has no limit.
func ruleSpacing(u operator.KeyUsage) time.Duration {
	var w throttle.Limit
	for _, l := range u.Limits {
		if l.Limit.Paced {
			return l.Limit.Per / time.Duration(l.Limit.N)
		}
		if w.N == 0 || l.Limit.Per < w.Per || l.Limit.Per == w.Per && l.Limit.N < w.N {
			w = l.Limit
		}
	}
	if w.N == 0 {
		return 0
	}
	return w.Per / time.Duration(w.N)
}

// inFlightText says how many leases of the cap are held and how many
// requests wait for one.
func inFlightText(u operator.KeyUsage) string {
	s := fmt.Sprintf("%d/%d leases held", u.Held, u.InFlight)
	if u.Held > 0 {
		s += ", the earliest until " + human(u.HeldFor) + " unless renewed"
	}
	q := fmt.Sprintf("%d", u.Queued)
	if u.QueueMore {
		q = "more than " + q
	}
	return s + "; " + q + " waiting in the queue"
}

// nextText says when a request of cost 1 could go, and why.
func nextText(t *target, u operator.KeyUsage) string {
	if u.Next <= 0 {
		return "now"
	}
	s := "in " + human(u.Next)
	switch u.NextCause {
	case operator.CauseLimit:
		switch {
		case u.NextLimit < len(t.limits):
			s += " (limit " + formatLimit(t.limits[u.NextLimit]) + ")"
		case u.NextLimit < len(u.Limits):
			s += " (the default pace)"
		}
	case operator.CauseUpstream:
		s += " (the upstream's pause or budget)"
	case operator.CauseLearned:
		s += " (the learned limit or pace)"
	}
	if u.Capped {
		s += " at least"
	}
	return s
}

// watchLine is one line of watch: the time, each limit's sends in its
// window against N (and reservations waiting), the next slot and the pause.
func watchLine(now time.Time, t *target, u operator.KeyUsage) string {
	var b strings.Builder
	b.WriteString(now.UTC().Format("15:04:05.000"))
	for i, l := range u.Limits {
		given := l.Limit
		if i < len(t.limits) {
			given = t.limits[i]
		}
		fmt.Fprintf(&b, "  %s %d/%d", rowName(t, i, given), l.Used, capacity(l.Limit))
		if l.Reserved > 0 {
			fmt.Fprintf(&b, " +%d", l.Reserved)
		}
		if l.Previous > 0 {
			fmt.Fprintf(&b, " prev %d", l.Previous)
		}
	}
	if u.InFlight > 0 {
		fmt.Fprintf(&b, "  in flight %d/%d", u.Held, u.InFlight)
		if u.Queued > 0 || u.QueueMore {
			fmt.Fprintf(&b, " queue %d", u.Queued)
			if u.QueueMore {
				b.WriteString("+")
			}
		}
	}
	fmt.Fprintf(&b, "  next %s  pause %s", nextShort(u), until(u.Pause))
	if p := u.LearnedPace; p.N > 0 {
		fmt.Fprintf(&b, "  learned pace 1/%s", human(p.Per))
		if own := ruleSpacing(u); own > 0 && p.Per > own+time.Microsecond {
			fmt.Fprintf(&b, " (%.0f%% slower)", 100*float64(p.Per-own)/float64(own))
		}
	}
	if u.LearnedMargin > 0 {
		fmt.Fprintf(&b, "  margin +%s", human(u.LearnedMargin))
	}
	return b.String()
}

// rowName names the i-th limit of a Usage: the limit as given, or the pace a
// log rule keeps by default, with its margin, after them.
func rowName(t *target, i int, l throttle.Limit) string {
	if i < len(t.limits) {
		return formatLimit(t.limits[i])
	}
	if l.Paced {
		return "default " + formatLimit(l)
	}
	return formatLimit(l)
}

// capacity is what a limit's used units count against: N, or for a paced
// limit the Burst+1 units that may go at once (operator.LimitUsage).
func capacity(l throttle.Limit) int {
	if l.Paced {
		return l.Burst + 1
	}
	return l.N
}

func nextShort(u operator.KeyUsage) string {
	if u.Next <= 0 {
		return "now"
	}
	return human(u.Next)
}

func until(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return human(d) + " left"
}

// human rounds a duration for reading: to the microsecond under a
// millisecond, to 0.1ms under a second, to the millisecond under a minute,
// to the second above.
func human(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return shortDuration(d.Round(time.Second))
}

// shown is the key as the store keeps it, without the rule's scope: the rate
// key, or its HMAC with a key secret (then the plain hash of a token, which
// the secret is there to hide, is not shown), or its hash when long.
func (t *target) shown() string { return strings.TrimPrefix(t.skey, t.rule+":") }
