// Command bothy is the one binary of the bothy sync server: it runs the
// server roles and the operator commands (migrations, event emission,
// consumer status, restore, webhooks, push).
//
// The commands are built on cobra. Every command that reads the
// configuration accepts --config FILE and a flag per configuration key
// (--consumer.batch_size=500); "bothy config keys" lists them all. The
// commands that the HTTP API can serve run through it when a server is
// named (--server URL or BOTHY_SERVER, with --token, BOTHY_TOKEN or the
// credentials "bothy login" saved), and on the database otherwise. Flags
// may come before or after a command's arguments; --help prints a
// command's usage on stdout. Exit codes: 0 success, 1 failure, 2 usage
// error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	// Remote commands run through the HTTP API when a server is named;
	// the others refuse --server.
	Remote bool
	// Setup defines the command's own flags on fs and returns its body,
	// which runs once the arguments are parsed. Setup does nothing else:
	// help and completion call it to learn the flags.
	Setup func(fs *pflag.FlagSet) func(ctx context.Context, c *call) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

// env is what every command shares.
type env struct {
	stdin          io.Reader
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
	fs   *pflag.FlagSet
	load func() (*config.Config, error)
	// remote is what the command line says about the server.
	remote *remoteFlags
	// cmd is the running command.
	cmd *cobra.Command
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
func jsonFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool("json", false, "print the result as JSON")
}

// errUsage marks an error in how the command was called: exit code 2 and a
// pointer to --help.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, environ: os.Environ()})
	stop()
	os.Exit(code)
}

// run runs the command args select and returns the exit code.
func run(ctx context.Context, args []string, e *env) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	root := newRoot(e)
	root.SetArgs(longFlags(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	name := strings.TrimPrefix(cmd.CommandPath(), "bothy ")
	var unknown *unknownCommandError
	switch {
	case errors.As(err, &unknown):
		fmt.Fprintf(e.stderr, "bothy: %v\n\nRun \"%s --help\" for the list of commands.\n", err, cmd.CommandPath())
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.stderr, "%s: %v\nRun \"%s --help\" for its usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
		return 2
	case cmd == root:
		fmt.Fprintf(e.stderr, "bothy: %v\n", err)
	default:
		fmt.Fprintf(e.stderr, "bothy %s: %v\n", name, err)
	}
	return 1
}

// configFlags adds --config and one flag per configuration key to fs and
// returns a function that loads the configuration once fs is parsed.
func configFlags(fs *pflag.FlagSet, e *env) func() (*config.Config, error) {
	path := fs.String("config", "", "configuration file (lines of key = value); default $BOTHY_CONFIG")
	set := map[string]*string{}
	for _, k := range config.Keys {
		set[k.Name] = new(string)
		fs.Var(&keyValue{v: set[k.Name]}, k.Name, k.Doc+" (default "+k.Default+")")
		_ = fs.SetAnnotation(k.Name, configAnnotation, []string{"true"})
	}
	_ = fs.SetAnnotation("config", configAnnotation, []string{"true"})
	return func() (*config.Config, error) {
		flags := map[string]string{}
		fs.Visit(func(f *pflag.Flag) {
			if _, ok := set[f.Name]; ok {
				flags[f.Name] = *set[f.Name]
			}
		})
		p := *path
		if p == "" {
			p = lookupEnv(e.environ, config.EnvConfig)
		}
		return config.Load(p, e.environ, flags)
	}
}

// configAnnotation marks the configuration flags, which help leaves out
// of a command's own flags.
const configAnnotation = "bothy-config"

// keyValue holds a configuration key's flag value; config.Load checks it.
type keyValue struct{ v *string }

func (k *keyValue) String() string     { return *k.v }
func (k *keyValue) Set(v string) error { *k.v = v; return nil }
func (k *keyValue) Type() string       { return "value" }

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

// cobraCommand is what cobra runs for c: its flags, arguments, help and
// completion, and its body.
func (c *command) cobraCommand(e *env, remote *remoteFlags) *cobra.Command {
	words := strings.Fields(c.Name)
	cc := &cobra.Command{
		Use:   strings.TrimSpace(words[len(words)-1] + " " + c.Args),
		Short: c.Summary,
		Args:  c.checkArgs,
	}
	if c.Remote {
		cc.Annotations = map[string]string{remoteAnnotation: "true"}
	}
	body := c.Setup(cc.Flags())
	var load func() (*config.Config, error)
	if !c.NoConfig {
		load = configFlags(cc.Flags(), e)
	}
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		if !c.Remote && cmd.Flags().Changed("server") {
			return fmt.Errorf("%w: %s does not run through the HTTP API; it takes no --server", errUsage, cmd.CommandPath())
		}
		return body(cmd.Context(), &call{env: e, args: args, fs: cmd.Flags(), load: load, remote: remote, cmd: cmd})
	}
	completeValues(cc, c, func(cmd *cobra.Command) *completionSource {
		return &completionSource{c: &call{env: e, fs: cmd.Flags(), load: load, remote: remote, cmd: cmd}}
	})
	return cc
}

func (c *command) checkArgs(_ *cobra.Command, pos []string) error {
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
