// Command bothy is the one binary of the bothy sync server: it runs the
// server roles and the operator commands (migrations, event emission,
// consumer status, restore, webhooks, push).
//
// Every command accepts --config FILE and a flag per configuration key
// (--consumer.batch_size=500); "bothy config keys" lists them all.
package main

import (
	"context"
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
)

// command is one "bothy NAME ..." command. Files named cmd_*.go register
// theirs in init, so adding a command touches no other file.
type command struct {
	// Name is the words that select it, such as "migrate up".
	Name    string
	Summary string
	// Run gets the arguments after Name.
	Run func(ctx context.Context, env *env, args []string) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

// env is what every command shares.
type env struct {
	stdout, stderr io.Writer
	environ        []string
}

// errUsage marks an error that should be followed by the usage text.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, e *env) int {
	c, rest := find(args)
	if c == nil {
		usage(e.stderr)
		if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			return 0
		}
		fmt.Fprintf(e.stderr, "\nbothy: unknown command %q\n", strings.Join(args, " "))
		return 2
	}
	if err := c.Run(ctx, e, rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(e.stderr, "bothy %s: %v\n", c.Name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
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

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bothy COMMAND [flags]")
	fmt.Fprintln(w)
	sorted := slices.Clone(commands)
	slices.SortFunc(sorted, func(a, b command) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-26s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nEvery command takes --config FILE and --KEY=VALUE for any configuration key (bothy config keys).")
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

func newFlagSet(name string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet("bothy "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
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

// dbCommand is the start of every command that talks to the database: it
// lets define add the command's own flags, parses args with the
// configuration flags, loads the configuration, opens the pool (the caller
// closes it) and returns the positional arguments.
func dbCommand(ctx context.Context, e *env, name string, args []string, define func(fs *flag.FlagSet)) (*config.Config, *pgxpool.Pool, []string, error) {
	fs := newFlagSet(name, e)
	if define != nil {
		define(fs)
	}
	load := configFlags(fs, e)
	if err := fs.Parse(args); err != nil {
		return nil, nil, nil, err
	}
	cfg, err := load()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("configuration: %w", err)
	}
	pool, err := app.OpenPool(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, pool, fs.Args(), nil
}
