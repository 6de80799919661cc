package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-go/throttle"
	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/internal/engine"
	"github.com/throttle-go/throttle/operator"
	"github.com/throttle-go/throttle/store"
)

// limits is the repeatable -limit flag.
type limits []throttle.Limit

func (l *limits) String() string {
	parts := make([]string, len(*l))
	for i, x := range *l {
		parts[i] = formatLimit(x)
	}
	return strings.Join(parts, ",")
}

func (l *limits) Set(s string) error {
	x, err := parseLimit(s)
	if err != nil {
		return err
	}
	*l = append(*l, x)
	return nil
}

// parseLimit reads "N/DURATION" ("100/1s", "5000/1h", "10/500ms"), a unit
// alone meaning one of it ("100/s", "5000/h"), and "d" a day ("1000/d"),
// then optionally "/PRECISION" for the buckets algorithm ("5000/1h/1m"), or
// "/paced" or "/paced+BURST" for a paced limit ("100/1s/paced+9").
func parseLimit(s string) (throttle.Limit, error) {
	ns, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return throttle.Limit{}, fmt.Errorf("limit %q: want N/DURATION, e.g. 100/1s", s)
	}
	per, prec, hasPrec := strings.Cut(per, "/")
	var precision time.Duration
	burst := -1 // not paced
	if b, ok := strings.CutPrefix(prec, "paced"); hasPrec && ok {
		hasPrec, burst = false, 0
		if b != "" {
			k, err := strconv.Atoi(strings.TrimPrefix(b, "+"))
			if err != nil || k < 0 || b[0] != '+' {
				return throttle.Limit{}, fmt.Errorf("limit %q: want paced or paced+BURST, e.g. 100/1s/paced+9", s)
			}
			burst = k
		}
	}
	if hasPrec {
		l, err := parseLimit("1/" + prec)
		if err != nil {
			return throttle.Limit{}, fmt.Errorf("limit %q: bad precision", s)
		}
		precision = l.Per
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		return throttle.Limit{}, fmt.Errorf("limit %q: N must be a whole number >= 1", s)
	}
	if per != "" && (per[0] < '0' || per[0] > '9') {
		per = "1" + per
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(per, "d"); ok {
		k, err := strconv.Atoi(days)
		if err != nil || k < 1 {
			return throttle.Limit{}, fmt.Errorf("limit %q: bad number of days", s)
		}
		d = time.Duration(k) * 24 * time.Hour
	} else if d, err = time.ParseDuration(per); err != nil || d < time.Microsecond {
		return throttle.Limit{}, fmt.Errorf("limit %q: the window must be a duration of at least 1µs, e.g. 1s, 1h", s)
	}
	if burst >= 0 {
		return throttle.Paced(n, d, burst), nil
	}
	l := throttle.Per(n, d)
	l.Precision = precision
	return l, nil
}

// formatLimit writes a limit as parseLimit reads it, shortly: "100/1s",
// "5000/1h", "10/500ms", "100/1s/paced+9".
func formatLimit(l throttle.Limit) string {
	s := strconv.Itoa(l.N) + "/" + shortDuration(l.Per)
	switch {
	case l.Paced && l.Burst > 0:
		s += "/paced+" + strconv.Itoa(l.Burst)
	case l.Paced:
		s += "/paced"
	case l.Precision != 0:
		s += "/" + shortDuration(l.Precision)
	}
	return s
}

// shortDuration is d without zero units: "1h", "1m30s", "500ms".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// keyFlags are the flags naming one rate key of one rule.
type keyFlags struct {
	conn
	rule       string
	limits     limits
	alg        string
	margin     time.Duration
	noPace     bool
	inFlight   int // the published rule's cap in flight, to read its leases
	key        string
	token      string
	tokenFile  string
	by         string
	secretFile string
	set        map[string]bool // the flags given, by name
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	k.conn.register(fs)
	fs.StringVar(&k.rule, "rule", "", "the rule's `name` (Rule.Name)")
	fs.Var(&k.limits, "limit", "a limit of the rule, `N/DURATION[/PRECISION]` (100/1s, 5000/1h, 5000/1h/1m for buckets); repeat for each, in the rule's order (default: the definition the processes publish)")
	fs.StringVar(&k.alg, "alg", "log", "the rule's algorithm: log, fixed, counter or buckets")
	fs.DurationVar(&k.margin, "margin", engine.DefaultMargin, "the rule's Margin (0 for a rule with NoMargin)")
	fs.BoolVar(&k.noPace, "no-default-pace", false, "the rule sets NoDefaultPace (without it, a log rule with no paced limit paces its slowest limit)")
	fs.StringVar(&k.key, "key", "", "the rate key as the rule's KeyFunc returns it (e.g. pg1, host:api.example.com, bearer:<hash>)")
	fs.StringVar(&k.token, "token", "", "a raw credential, hashed as the library does (prefer -token-file: a flag shows in ps)")
	fs.StringVar(&k.tokenFile, "token-file", "", "a `file` holding the raw credential (- for stdin)")
	fs.StringVar(&k.by, "by", "bearer", "with -token: how the rule keys it: bearer, query:<param> or header:<Name> (default: as the processes publish, else bearer)")
	fs.StringVar(&k.secretFile, "secret-file", "", "a `file` holding the WithKeySecret secret (one trailing newline is dropped)")
}

// errFlags says the flags are wrong (exit code 2).
type errFlags struct{ msg string }

func (e errFlags) Error() string { return e.msg }

// target is a resolved key: the store's key and how to read it.
type target struct {
	// source says which definition of the rule is used: published by the
	// processes, or given on the command line; warnings, what disagrees.
	source   string
	warnings []string
	rule     string
	rateKey  string           // as the KeyFunc returns it (hashed for a token)
	skey     string           // the store's key
	redis    string           // the Redis key of the log or counters, for display
	limits   []throttle.Limit // as given, without the margin
	tr       *throttle.Transport
	secrets  *secrets
	// exists reports whether anything is stored under the key.
	exists func(context.Context) (bool, error)
	// lost reports whether the key's log was deleted or lost while the
	// fleet ran: its seen mark outlives it for a window.
	lost func(context.Context) bool
}

// resolve derives the store key exactly as a Transport with this rule does:
// it builds one (no I/O) on st and asks the operator package. The rule's
// definition is the one its processes publish unless -limit gives one.
func (k *keyFlags) resolve(ctx context.Context, st store.Store, sec *secrets) (*target, error) {
	if k.rule == "" {
		return nil, errFlags{"-rule is required"}
	}
	src, warnings, err := k.definition(ctx, st)
	if err != nil {
		return nil, err
	}
	alg, err := contract.ParseAlgorithm(k.alg)
	if err != nil {
		return nil, errFlags{fmt.Sprintf("-alg %q: want log, fixed, counter or buckets", k.alg)}
	}
	sources := 0
	for _, s := range []string{k.key, k.token, k.tokenFile} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 {
		return nil, errFlags{"give exactly one of -key, -token and -token-file"}
	}
	rateKey := k.key
	if rateKey == "" {
		tok := k.token
		if k.tokenFile != "" {
			b, err := readSecretFile(k.tokenFile)
			if err != nil {
				return nil, err
			}
			tok = string(b)
		}
		sec.add(tok)
		if rateKey, err = operator.CredentialKey(k.by, tok); err != nil {
			return nil, errFlags{sec.clean(err)}
		}
	}
	margin := k.margin
	if margin == 0 {
		margin = throttle.NoMargin
	}
	rule := throttle.Rule{Name: k.rule, Limits: k.limits, Margin: margin, Algorithm: throttle.Algorithm(alg), Key: throttle.Fixed(rateKey), NoDefaultPace: k.noPace, InFlight: k.inFlight}
	opts := []throttle.Option{throttle.WithDefault(rule)}
	if k.secretFile != "" {
		secret, err := readSecretFile(k.secretFile)
		if err != nil {
			return nil, err
		}
		sec.add(string(secret))
		opts = append(opts, throttle.WithKeySecret(secret))
	}
	tr, err := throttle.New(nil, st, opts...)
	if err != nil {
		return nil, errFlags{sec.clean(err)}
	}
	skey, err := operator.StoreKey(tr, k.rule, rateKey)
	if err != nil {
		return nil, errFlags{sec.clean(err)}
	}
	t := &target{source: src, warnings: warnings, rule: k.rule, rateKey: rateKey, skey: skey, limits: k.limits, tr: tr, secrets: sec}
	t.redis = k.prefix + "{" + skey + "}"
	if alg != contract.SlidingLog {
		t.redis += ":" + alg.String()
	}
	return t, nil
}

// readSecretFile reads a token or a secret from a file ("-": stdin),
// dropping one trailing newline. Its errors name the file, not its content.
func readSecretFile(name string) ([]byte, error) {
	var b []byte
	var err error
	if name == "-" {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(stdin)
		b = buf.Bytes()
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	return b, nil
}
