// Command bothy is the one binary of the bothy sync server: it runs the
// server roles and the operator commands (migrations, event emission,
// consumer status, restore, webhooks, push).
//
// Every command accepts --config FILE and a flag per configuration key
// (--consumer.batch_size=500); "bothy config keys" lists them all. Flags may
// come before or after a command's arguments; --help prints a command's
// usage on stdout. Exit codes: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
)

// command is one "bothy NAME ..." command. Files named cmd_*.go register
// theirs in init, so adding a command touches no other file.
type command struct {
	// Name is the words that select it, such as "migrate up". Its leading
	// words form groups ("migrate") that list their commands.
	Name string
	// Args names the positional arguments for the usage line, one word
	// each ("SUBSCRIPTION_ID"); the command gets exactly that many.
	Args    string
	Summary string
	// NoConfig leaves out --config and the configuration key flags, for
	// commands that never read the configuration.
	NoConfig bool
	// Setup defines the command's own flags on fs and returns its body,
	// which runs once the arguments are parsed. Setup does nothing else:
	// help and completion call it to learn the flags.
	Setup func(fs *flag.FlagSet) func(ctx context.Context, c *call) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

// env is what every command shares.
type env struct {
	stdout, stderr io.Writer
	environ        []string
}

// call is one run of a command, after its flags are parsed.
type call struct {
	*env
	// args are the positional arguments, as many as the command's Args.
	args []string
	// fs holds the parsed flags; a command may Set configuration keys on
	// it before config.
	fs   *flag.FlagSet
	load func() (*config.Config, error)
}

// config loads the configuration from the defaults, the file, the
// environment and the flags.
func (c *call) config() (*config.Config, error) {
	if c.load == nil {
		return nil, errors.New("this command takes no configuration")
	}
	cfg, err := c.load()
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return cfg, nil
}

// open is the start of every command that talks to the database: it loads
// the configuration and opens the pool, which the caller closes.
func (c *call) open(ctx context.Context) (*config.Config, *pgxpool.Pool, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, nil, err
	}
	pool, err := app.OpenPool(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, pool, nil
}

// printJSON writes v to stdout as indented JSON: the --json output of every
// command that prints a result.
func (c *call) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// jsonFlag defines --json on fs.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the result as JSON")
}

// errUsage marks an error in how the command was called: exit code 2 and a
// pointer to --help.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()})
	stop()
	os.Exit(code)
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "--h"
}

// run runs the command args select and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	switch {
	case len(args) == 0 || isHelp(args[0]):
		usage(e.stdout, "")
		return 0
	case args[0] == "help":
		return help(e, args[1:])
	case args[0] == "--version" || args[0] == "-version":
		args = append([]string{"version"}, args[1:]...)
	}
	c, rest := find(args)
	if c == nil {
		group := groupOf(args)
		n := len(strings.Fields(group))
		if len(args) == n || isHelp(args[n]) {
			usage(e.stdout, group) // "bothy webhooks": the group's commands
			return 0
		}
		fmt.Fprintf(e.stderr, "bothy: unknown command %q\n\n", strings.Join(args[:n+1], " "))
		usage(e.stderr, group)
		return 2
	}
	return c.exec(ctx, e, rest)
}

// help answers "bothy help [COMMAND]".
func help(e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stdout, "")
		return 0
	}
	if c, rest := find(args); c != nil && len(rest) == 0 {
		c.usage(e.stdout)
		return 0
	}
	if g := groupOf(args); g == strings.Join(args, " ") {
		usage(e.stdout, g)
		return 0
	}
	fmt.Fprintf(e.stderr, "bothy help: unknown command %q\n", strings.Join(args, " "))
	return 2
}

// exec parses args for c, runs it and returns the exit code.
func (c *command) exec(ctx context.Context, e *env, args []string) int {
	in := c.prepare(e)
	pos, err := parseArgs(in.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.usage(e.stdout)
		return 0
	}
	if err == nil {
		err = c.checkArgs(pos)
	} else {
		// The flag package says "-name" whatever the user typed.
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			err = fmt.Errorf("unknown flag --%s", name)
		}
		err = fmt.Errorf("%w: %w", errUsage, err)
	}
	if err == nil {
		err = in.body(ctx, &call{env: e, args: pos, fs: in.fs, load: in.load})
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "bothy %s: %v\nRun \"bothy %s --help\" for its usage.\n", c.Name, err, c.Name)
		return 2
	default:
		fmt.Fprintf(e.stderr, "bothy %s: %v\n", c.Name, err)
		return 1
	}
}

// instance is a command made ready for one run: its flag set, its body,
// and what the help and the completion scripts need to know.
type instance struct {
	fs *flag.FlagSet
	// own are the names of the command's own flags, sorted.
	own  []string
	body func(ctx context.Context, c *call) error
	// load loads the configuration; nil for a NoConfig command.
	load func() (*config.Config, error)
}

// prepare defines c's flags and, unless NoConfig, the configuration
// flags on a new flag set that reports nothing itself: exec and usage do.
func (c *command) prepare(e *env) *instance {
	in := &instance{fs: flag.NewFlagSet("bothy "+c.Name, flag.ContinueOnError)}
	in.fs.SetOutput(io.Discard)
	in.fs.Usage = func() {}
	in.body = c.Setup(in.fs)
	in.fs.VisitAll(func(f *flag.Flag) { in.own = append(in.own, f.Name) })
	if !c.NoConfig {
		in.load = configFlags(in.fs, e)
	}
	return in
}

func (c *command) checkArgs(pos []string) error {
	want := strings.Fields(c.Args)
	if len(pos) == len(want) {
		return nil
	}
	got := "no arguments"
	if len(pos) > 0 {
		got = fmt.Sprintf("%q", pos)
	}
	if len(want) == 0 {
		return fmt.Errorf("%w: takes no arguments, got %s", errUsage, got)
	}
	return fmt.Errorf("%w: takes %s, got %s", errUsage, c.Args, got)
}

// parseArgs parses flags wherever they stand among args, before or after
// positional arguments, and returns the positional ones. After "--"
// everything is positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// find picks the command with the longest name matching the first words.
func find(args []string) (*command, []string) {
	var best *command
	n := 0
	for i := range commands {
		words := strings.Fields(commands[i].Name)
		if len(words) <= len(args) && slices.Equal(words, args[:len(words)]) && len(words) > n {
			best, n = &commands[i], len(words)
		}
	}
	return best, args[n:]
}

// groupOf returns the longest group ("webhooks", "authz token") that args
// start with, "" for none.
func groupOf(args []string) string {
	group := ""
	for n := 1; n <= len(args); n++ {
		prefix := strings.Join(args[:n], " ") + " "
		if !slices.ContainsFunc(commands, func(c command) bool { return strings.HasPrefix(c.Name, prefix) }) {
			break
		}
		group = strings.TrimSpace(prefix)
	}
	return group
}

// sortedCommands returns the commands in group ("" for all) by name.
func sortedCommands(group string) []command {
	var out []command
	for _, c := range commands {
		if group == "" || strings.HasPrefix(c.Name, group+" ") {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b command) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// usage lists the commands of group, "" for all.
func usage(w io.Writer, group string) {
	cmd := strings.TrimSpace("bothy " + group)
	if group == "" {
		fmt.Fprintln(w, "bothy runs the bothy sync server and its operator commands.")
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Usage:\n  %s COMMAND [ARGUMENTS] [flags]\n\nCommands:\n", cmd)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range sortedCommands(group) {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.Name+" "+c.Args), c.Summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "bothy COMMAND --help" for a command's flags; they may come before or after its
arguments. Commands that read the configuration take --config FILE and --KEY=VALUE for
any key ("bothy config keys"); commands that print a result take --json.
Exit codes: 0 success, 1 failure, 2 usage error.
`)
}

// usage writes c's help: usage line, summary and its own flags.
func (c *command) usage(w io.Writer) {
	in := c.prepare(&env{})
	fmt.Fprintf(w, "Usage:\n  %s [flags]\n\n%s%s.\n", strings.TrimSpace("bothy "+c.Name+" "+c.Args), strings.ToUpper(c.Summary[:1]), c.Summary[1:])
	if len(in.own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, name := range in.own {
			f := in.fs.Lookup(name)
			arg, text := flag.UnquoteUsage(f)
			left := "--" + name
			if arg != "" {
				left += " " + arg
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				text += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  %-24s %s\n", left, text)
		}
	}
	if !c.NoConfig {
		fmt.Fprintln(w, "\nConfiguration: --config FILE (default $BOTHY_CONFIG) and --KEY=VALUE for every key of \"bothy config keys\".")
	}
}

// configFlags adds --config and one flag per configuration key to fs and
// returns a function that loads the configuration once fs is parsed.
func configFlags(fs *flag.FlagSet, e *env) func() (*config.Config, error) {
	path := fs.String("config", "", "configuration file (lines of key = value); default $BOTHY_CONFIG")
	set := map[string]*string{}
	for _, k := range config.Keys {
		set[k.Name] = new(string)
		fs.Func(k.Name, k.Doc+" (default "+k.Default+")", func(v string) error { *set[k.Name] = v; return nil })
	}
	return func() (*config.Config, error) {
		flags := map[string]string{}
		fs.Visit(func(f *flag.Flag) {
			if _, ok := set[f.Name]; ok {
				flags[f.Name] = *set[f.Name]
			}
		})
		p := *path
		if p == "" {
			p = lookupEnv(e.environ, "BOTHY_CONFIG")
		}
		return config.Load(p, e.environ, flags)
	}
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// newLogger builds the process logger from the configuration.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
