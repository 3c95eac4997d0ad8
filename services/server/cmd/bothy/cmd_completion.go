package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "completion", Args: "SHELL", Summary: "print a completion script for bash, zsh or fish", NoConfig: true, Setup: setupCompletion})
}

// The scripts cobra writes call the binary back ("bothy __complete ...")
// for every completion, so they complete what the binary knows at that
// moment: commands, flags and the values below, subscription IDs included.
func setupCompletion(fs *pflag.FlagSet) func(context.Context, *call) error {
	return func(ctx context.Context, c *call) error {
		root := c.cmd.Root()
		switch c.args[0] {
		case "bash":
			fmt.Fprintln(c.stdout, "# bash completion for bothy. Load it with: source <(bothy completion bash)   (e.g. in ~/.bashrc)")
			return root.GenBashCompletionV2(c.stdout, true)
		case "zsh":
			fmt.Fprintln(c.stdout, "# Load it with: source <(bothy completion zsh)   (after compinit, e.g. in ~/.zshrc)")
			return root.GenZshCompletion(c.stdout)
		case "fish":
			fmt.Fprintln(c.stdout, "# fish completion for bothy. Load it with: bothy completion fish | source   (or save it as ~/.config/fish/completions/bothy.fish)")
			return root.GenFishCompletion(c.stdout, true)
		}
		return fmt.Errorf("%w: shell %q: want bash, zsh or fish", errUsage, c.args[0])
	}
}

// flagValues are the values of the flags whose values are a fixed set,
// by flag name: the same name means the same thing in every command.
var flagValues = map[string][]cobra.Completion{
	"policy": {
		cobra.CompletionWithDesc(webhooks.PolicyOrdered, "one at a time in seq order; a spent retry budget disables"),
		cobra.CompletionWithDesc(webhooks.PolicyOrderedDeadLetter, "in order; a spent budget makes the delivery dead and goes on"),
		cobra.CompletionWithDesc(webhooks.PolicyUnordered, "parallel, for receivers that dedupe by webhook-id"),
	},
	"status": {webhooks.DeliveryPending, webhooks.DeliveryDelivered, webhooks.DeliveryDead, webhooks.DeliverySkipped},
	"from": {
		cobra.CompletionWithDesc("head", "resume at the head, skipping what it missed"),
		cobra.CompletionWithDesc("backlog", "send what it missed first, while the log holds it"),
	},
	"right":    {string(authz.RightRead), string(authz.RightWrite), string(authz.RightAdmin)},
	"kind":     {string(authz.KindUser), string(authz.KindApp)},
	"role":     {"api", "worker", "all"},
	"postgres": {"auto", "local", "private"},
}

// argValues complete positional arguments by their name in a command's
// Args.
var argValues = map[string]func(ctx context.Context, s *completionSource, toComplete string) []cobra.Completion{
	"SHELL": func(context.Context, *completionSource, string) []cobra.Completion {
		return []string{"bash", "fish", "zsh"}
	},
	"SUBSCRIPTION_ID": subscriptionIDs,
	"PRINCIPAL":       principalIDs,
}

// completionSource is where completions that need data get it: the server
// when one is named, else the database of the configuration.
type completionSource struct {
	c *call
}

// completionContext bounds what completing a value may ask a server or
// the database, so a slow one never hangs the shell.
func completionContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, 3*time.Second)
}

// completeValues registers the value completions of cmd, which runs c.
func completeValues(cmd *cobra.Command, c *command, src func(*cobra.Command) *completionSource) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if vals := flagCompletions(f); vals != nil {
			_ = cmd.RegisterFlagCompletionFunc(f.Name, cobra.FixedCompletions(vals, cobra.ShellCompDirectiveNoFileComp))
		}
	})
	if cmd.Flags().Lookup("scopes") != nil {
		_ = cmd.RegisterFlagCompletionFunc("scopes", completeScopes)
	}
	if cmd.Flags().Lookup("events") != nil {
		_ = cmd.RegisterFlagCompletionFunc("events", func(cc *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			ctx, cancel := completionContext(cc)
			defer cancel()
			return src(cc).eventTypes(ctx, args, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		})
	}
	names := strings.Fields(c.Args)
	cmd.ValidArgsFunction = func(cc *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(names) || argValues[names[len(args)]] == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := completionContext(cc)
		defer cancel()
		return argValues[names[len(args)]](ctx, src(cc), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// flagCompletions returns the fixed values of f: from flagValues, or for a
// configuration key whose range lists its values ("text or json",
// "api, worker or all").
func flagCompletions(f *pflag.Flag) []cobra.Completion {
	if vals, ok := flagValues[f.Name]; ok {
		return vals
	}
	if _, ok := f.Annotations[configAnnotation]; !ok {
		return nil
	}
	for _, k := range config.Keys {
		if k.Name == f.Name {
			return rangeValues(k.Range)
		}
	}
	return nil
}

var rangeWord = regexp.MustCompile(`^[a-z0-9_-]+$`)

// rangeValues reads "a, b or c" as its values, nil for a range of another
// kind ("1..100000", "empty or at least 16 characters").
func rangeValues(r string) []cobra.Completion {
	var out []cobra.Completion
	for _, part := range strings.Split(strings.ReplaceAll(r, " or ", ", "), ", ") {
		if !rangeWord.MatchString(part) || part == "empty" {
			return nil
		}
		out = append(out, part)
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// completeScopes completes the last of a comma-separated list of scopes.
func completeScopes(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	done := ""
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done = toComplete[:i+1]
	}
	var out []cobra.Completion
	for _, s := range tokenScopes {
		if !strings.Contains(done, s+",") {
			out = append(out, done+s)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// subscriptionIDs are the subscriptions the server lists for the token,
// or the database has, each described by its space and URL.
func subscriptionIDs(ctx context.Context, s *completionSource, toComplete string) []cobra.Completion {
	svc, done, err := s.c.webhooks(ctx)
	if err != nil {
		return nil
	}
	defer done()
	subs, _, err := svc.List(ctx, &listQuery{})
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, v := range subs {
		if strings.HasPrefix(v.ID.String(), toComplete) {
			out = append(out, cobra.CompletionWithDesc(v.ID.String(), v.Space+" "+redactURL(v.URL)+" ("+v.Status+")"))
		}
	}
	return out
}

// eventTypes completes the last of a comma-separated list of event types:
// "*", and with --server the types the server lists for the space (--space,
// or the space of the subscription named by the first argument), less
// those already given.
func (s *completionSource) eventTypes(ctx context.Context, args []string, toComplete string) []cobra.Completion {
	done := ""
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done = toComplete[:i+1]
	}
	out := []cobra.Completion{done + "*"}
	api, err := s.c.remote.client()
	if api == nil || err != nil {
		return out
	}
	space, _ := s.c.fs.GetString("space")
	if id, err := uuid.Parse(firstOr(args, "")); space == "" && err == nil {
		var sub webhooks.SubscriptionView
		if api.do(ctx, http.MethodGet, subscriptionPath(id, ""), nil, nil, &sub) == nil {
			space = sub.Space
		}
	}
	var res struct {
		EventTypes []struct {
			Type string `json:"type"`
		} `json:"event_types"`
	}
	if space == "" || api.do(ctx, http.MethodGet, "/v1/spaces/"+url.PathEscape(space)+"/event-types", nil, nil, &res) != nil {
		return out
	}
	given := strings.Split(done, ",")
	for _, t := range res.EventTypes {
		if !slices.Contains(given, t.Type) {
			out = append(out, done+t.Type)
		}
	}
	return out
}

func firstOr(ss []string, none string) string {
	if len(ss) == 0 {
		return none
	}
	return ss[0]
}

// principalIDs are the first page of principals, where the caller may
// list them (principals:manage through the server; the operator on the
// database).
func principalIDs(ctx context.Context, s *completionSource, toComplete string) []cobra.Completion {
	svc, done, err := s.c.admin(ctx)
	if err != nil {
		return nil
	}
	defer done()
	pg, err := svc.Principals(ctx, &pageQuery{Limit: page.MaxLimit})
	if err != nil {
		return nil
	}
	var out []cobra.Completion
	for _, p := range pg.Principals {
		if strings.HasPrefix(p.ID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(p.ID, p.Kind))
		}
	}
	return out
}
