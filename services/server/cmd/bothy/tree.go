package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newRoot builds the command tree for one run: a group command for every
// leading word of a registered name ("webhooks", "authz token"), the
// registered commands under them, our help command and the shared
// behaviour (errors are returned to run, not printed; flag errors are usage
// errors; help is written the same way for every command).
func newRoot(e *env) *cobra.Command {
	root := newGroup("bothy")
	root.Short = "bothy runs the bothy sync server and its operator commands."
	root.SilenceErrors, root.SilenceUsage = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	remote := addRemoteFlags(root.PersistentFlags(), e)
	groups := map[string]*cobra.Command{"": root}
	for i := range commands {
		words := strings.Fields(commands[i].Name)
		parent := root
		for j := 1; j < len(words); j++ {
			path := strings.Join(words[:j], " ")
			if groups[path] == nil {
				groups[path] = newGroup(words[j-1])
				parent.AddCommand(groups[path])
			}
			parent = groups[path]
		}
		parent.AddCommand(commands[i].cobraCommand(e, remote))
	}
	for path, g := range groups {
		if path != "" {
			g.Short = "commands: " + strings.Join(commandNames(g), ", ")
		}
	}
	root.SetHelpCommand(newHelpCommand())
	root.SetHelpFunc(writeHelp)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		msg := strings.Replace(err.Error(), "unknown flag: ", "unknown flag ", 1)
		msg = strings.Replace(msg, "unknown shorthand flag: ", "unknown flag ", 1)
		return fmt.Errorf("%w: %s", errUsage, msg)
	})
	return root
}

// commandNames are the names of the commands right under g.
func commandNames(g *cobra.Command) []string {
	var out []string
	for _, c := range g.Commands() {
		out = append(out, c.Name())
	}
	return out
}

// newGroup is a command that only groups others: alone it lists them, and
// a word it does not know is an unknown command with suggestions.
func newGroup(name string) *cobra.Command {
	return &cobra.Command{
		Use:                        name,
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE:                       func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		ValidArgsFunction:          cobra.NoFileCompletions,
	}
}

// unknownCommandError is a word that names no command of group.
type unknownCommandError struct {
	path    string // the words up to and including the unknown one
	suggest []string
}

func (u *unknownCommandError) Error() string {
	msg := fmt.Sprintf("unknown command %q", u.path)
	if len(u.suggest) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(u.suggest, "\n\t")
	}
	return msg
}

// unknownCommand refuses the words after a group: they name no command of
// it, or cobra would have found it. Its suggestions are cobra's (edit
// distance and prefix) for the first word, completed with the words after
// it when they lead to a command: "bothy webhook list" suggests
// "bothy webhooks list".
func unknownCommand(group *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	path := strings.TrimPrefix(group.CommandPath()+" "+args[0], "bothy ")
	u := &unknownCommandError{path: path}
	for _, s := range group.SuggestionsFor(args[0]) {
		line := group.CommandPath() + " " + s
		if sub, rest, err := group.Find(append([]string{s}, args[1:]...)); err == nil && len(rest) < len(args)-1 {
			line = sub.CommandPath()
		}
		u.suggest = append(u.suggest, line)
	}
	return u
}

// newHelpCommand answers "bothy help [COMMAND]" on stdout; an unknown
// command is a usage error.
func newHelpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "help about any command",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, _ := cmd.Root().Find(args)
			var out []cobra.Completion
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() {
					out = append(out, s.Name())
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return fmt.Errorf("%w: unknown command %q", errUsage, strings.Join(args, " "))
			}
			return target.Help()
		},
	}
}

// writeHelp is every command's --help: a group lists its commands, a
// command shows its usage line and own flags.
func writeHelp(cmd *cobra.Command, _ []string) {
	w := cmd.OutOrStdout()
	if cmd.HasSubCommands() {
		writeGroupUsage(w, cmd)
		return
	}
	fmt.Fprintf(w, "Usage:\n  %s\n\n%s%s.\n", cmd.UseLine(), strings.ToUpper(cmd.Short[:1]), cmd.Short[1:])
	own := pflag.NewFlagSet("own", pflag.ContinueOnError)
	config := false
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[configAnnotation]; ok {
			config = true
			return
		}
		own.AddFlag(f)
	})
	if own.HasFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", own.FlagUsages())
	}
	if cmd.Annotations[remoteAnnotation] != "" {
		fmt.Fprintf(w, "\nServer:\n%s", cmd.InheritedFlags().FlagUsages())
	}
	if config {
		fmt.Fprintln(w, "\nConfiguration: --config FILE (default $BOTHY_CONFIG) and --KEY=VALUE for every key of \"bothy config keys\".")
	}
}

// writeGroupUsage lists the commands under group with their arguments.
func writeGroupUsage(w io.Writer, group *cobra.Command) {
	if !group.HasParent() {
		fmt.Fprintf(w, "%s\n\n", group.Short)
	}
	fmt.Fprintf(w, "Usage:\n  %s COMMAND [ARGUMENTS] [flags]\n\nCommands:\n", group.CommandPath())
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range leaves(group) {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimPrefix(c.CommandPath()+strings.TrimPrefix(c.Use, c.Name()), "bothy "), c.Short)
	}
	tw.Flush()
	fmt.Fprint(w, `
Run "bothy COMMAND --help" for a command's flags; they may come before or after its
arguments. Commands that read the configuration take --config FILE and --KEY=VALUE for
any key ("bothy config keys"); commands that print a result take --json. Commands the
HTTP API serves run through it with --server URL (or BOTHY_SERVER) and a token from
--token, BOTHY_TOKEN or "bothy login"; the others connect to the database.
Exit codes: 0 success, 1 failure, 2 usage error.
`)
}

// leaves returns the commands under c that are not groups, by path.
func leaves(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, s := range c.Commands() {
		switch {
		case s.Hidden || s.Name() == "help":
		case s.HasSubCommands():
			out = append(out, leaves(s)...)
		default:
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *cobra.Command) int { return strings.Compare(a.CommandPath(), b.CommandPath()) })
	return out
}

// longFlags accepts the Go flag package's single-dash long flags
// (-json, -limit=5), which earlier versions of this command took, by
// giving them their second dash. Only names the command defines are
// rewritten, never a flag's value or anything after "--"; -h stays the
// shorthand for --help.
func longFlags(root *cobra.Command, args []string) []string {
	if len(args) > 0 && strings.HasPrefix(args[0], "__complete") {
		return args
	}
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		long := strings.TrimLeft(a, "-")
		name, _, hasValue := strings.Cut(long, "=")
		f := lookup(name)
		if f == nil || len(name) < 2 {
			continue
		}
		out[i] = "--" + long
		if !hasValue && f.NoOptDefVal == "" {
			i++ // the next word is this flag's value
		}
	}
	return out
}
