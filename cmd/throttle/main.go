// Command throttle inspects and repairs the state that throttle keeps in
// Redis, and checks a Redis for it.
//
//	go install github.com/throttle-go/throttle/cmd/throttle@latest
//
//	throttle rules
//	throttle usage -rule NAME (-key RATEKEY | -token-file F) [-secret-file F]
//	throttle usage -rule NAME -limit 100/1s [-limit 5000/1h] (-key RATEKEY | -token-file F -by KIND) [-secret-file F]
//	throttle watch …the same flags… [-every 1s] [-for DURATION]
//	throttle reset …the same flags… [-yes]
//	throttle set RULE LIMIT... [-for DURATION] [-by WHO]
//	throttle set RULE [-clear] | throttle set -history RULE
//	throttle check
//
// Every subcommand takes -redis URL (one server, Sentinel or Cluster, as
// store.NewRedisURL reads it; default the
// THROTTLE_REDIS environment variable, else redis://127.0.0.1:6379/0) and
// -prefix (store.DefaultPrefix). The URL, which may hold a password, is never
// printed; nor are a token or a key secret. See docs/cli.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-go/throttle/internal/contract"
	"github.com/throttle-go/throttle/store"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// stdin is where reset reads its confirmation (a test replaces it).
var stdin io.Reader = os.Stdin

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // a check failed, Redis could not be reached, …
	exitUsage  = 2 // bad flags
)

const usageText = `usage: throttle <command> [flags]

commands:
  rules   list the rules the running processes publish; warn where they disagree
  usage   print the usage of one rate key, per limit
  watch   print it every interval until interrupted (or -for)
  reset   delete the state of one rate key (asks unless -yes)
  set     lower a rule's limits for every process, until cleared or for a while; show, clear, history
  check   check a Redis: version, eviction policy, scripts, latency, ACL

Run "throttle <command> -h" for its flags.
`

// run is the whole command: it parses args, writes to stdout and stderr, and
// returns the exit code. SIGINT cancels it.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	var cmd func(context.Context, []string, io.Writer, io.Writer) int
	switch args[0] {
	case "usage":
		cmd = cmdUsage
	case "watch":
		cmd = cmdWatch
	case "reset":
		cmd = cmdReset
	case "check":
		cmd = cmdCheck
	case "rules":
		cmd = cmdRules
	case "set":
		cmd = cmdSet
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "throttle: unknown command %q\n\n%s", args[0], usageText)
		return exitUsage
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// conn is the -redis and -prefix flags of every command.
type conn struct {
	url    string
	prefix string
}

func (c *conn) register(fs *flag.FlagSet) {
	def := os.Getenv("THROTTLE_REDIS")
	if def == "" {
		def = "redis://127.0.0.1:6379/0"
	}
	// The default is not shown in -h: the environment's URL may hold a password.
	fs.StringVar(&c.url, "redis", "", "Redis `URL`: redis://, rediss://, redis-sentinel://, redis-cluster:// or unix:// (default: $THROTTLE_REDIS, else redis://127.0.0.1:6379/0); never printed")
	fs.StringVar(&c.prefix, "prefix", "throttle:", "the store's key prefix (store.WithPrefix)")
	c.url = def
}

// errBadURL is the error of an unusable -redis URL; it never holds the URL.
var errBadURL = errors.New("invalid -redis URL (not shown: it may hold a password); want redis://, rediss://, redis-sentinel://, redis-cluster:// or unix:// (docs/redis.md)")

// open makes the client and the store of the URL, as store.NewRedisURL does
// for a program: one server, Sentinel or Cluster. It does no I/O. extra are
// more store options (the prefix is always given).
func (c *conn) open(extra ...store.RedisOption) (redis.UniversalClient, contract.Admin, *secrets, error) {
	url := c.url
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	sec := &secrets{}
	sec.addURL(url)
	st, client, err := store.NewRedisURL(url, append([]store.RedisOption{store.WithPrefix(c.prefix)}, extra...)...)
	if err != nil {
		// NewRedisURL's errors never quote the URL or its password.
		return nil, nil, nil, fmt.Errorf("%w: %s", errBadURL, sec.clean(err))
	}
	// NewRedisURL's store is the Redis store, which has the operator's side.
	adm, ok := st.(contract.Admin)
	if !ok {
		_ = client.Close()
		return nil, nil, nil, fmt.Errorf("throttle: unexpected store %T", st)
	}
	return client, adm, sec, nil
}

// secrets scrubs known secret strings from what the command prints.
type secrets struct{ list []string }

// addURL adds the passwords a Redis URL may hold: its userinfo's and the
// password options (a Sentinel URL has two).
func (s *secrets) addURL(raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparsable: the whole userinfo, however it is spelled, is secret.
		if _, rest, ok := strings.Cut(raw, "://"); ok {
			if at := strings.LastIndex(rest, "@"); at > 0 {
				s.add(rest[:at])
				if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
					s.add(pw)
				}
			}
		}
		return
	}
	if pw, ok := u.User.Password(); ok {
		s.add(pw)
	}
	for _, name := range []string{"password", "sentinel_password"} {
		s.add(u.Query().Get(name))
	}
}

func (s *secrets) add(v string) {
	if s != nil && len(v) >= 1 {
		s.list = append(s.list, v)
	}
}

// clean returns err's text with every secret replaced by "***".
func (s *secrets) clean(err error) string {
	msg := err.Error()
	if s == nil {
		return msg
	}
	for _, v := range s.list {
		msg = strings.ReplaceAll(msg, v, "***")
	}
	return msg
}
