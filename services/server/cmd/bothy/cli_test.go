package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/buildinfo"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/dburl"
)

// unreachableDB is a database URL nothing listens on: commands that need
// the database fail at once.
const unreachableDB = "--database.url=postgres://postgres@127.0.0.1:1/bothy?sslmode=disable"

// TestCLI_Conventions checks the conventions every command follows, none
// of which needs a database.
func TestCLI_Conventions(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		args []string
		code int
		// stdout and stderr must contain these; an empty stderr list means
		// stderr must be empty.
		stdout, stderr []string
	}{
		{"NoArgumentsListsEveryCommandOnStdout", nil, 0, []string{"Usage:", "webhooks deliveries SUBSCRIPTION_ID", "version"}, nil},
		{"HelpFlagPrintsUsageOnStdout", []string{"--help"}, 0, []string{"Usage:", "server"}, nil},
		{"HelpCommandPrintsUsageOnStdout", []string{"help"}, 0, []string{"Usage:", "server"}, nil},
		{"CommandHelpOnStdout", []string{"webhooks", "deliveries", "--help"}, 0,
			[]string{"bothy webhooks deliveries SUBSCRIPTION_ID [flags]", "--attempts", "--json", "--limit int", "(default 50)"}, nil},
		{"CommandShortHelpOnStdout", []string{"server", "-h"}, 0, []string{"bothy server [flags]", "--role"}, nil},
		{"HelpAfterArgumentsOnStdout", []string{"webhooks", "deliveries", "0b0e6f8e-0000-4000-8000-000000000000", "--help"}, 0,
			[]string{"bothy webhooks deliveries SUBSCRIPTION_ID [flags]"}, nil},
		{"HelpCommandForACommand", []string{"help", "authz", "token", "create"}, 0, []string{"bothy authz token create [flags]", "--scopes"}, nil},
		{"GroupAloneListsItsCommands", []string{"webhooks"}, 0,
			[]string{"webhooks list", "webhooks create", "webhooks deliveries SUBSCRIPTION_ID", "webhooks rotate-secret SUBSCRIPTION_ID"}, nil},
		{"NestedGroupListsItsCommands", []string{"authz", "token"}, 0, []string{"authz token create", "authz token revoke TOKEN_ID"}, nil},
		{"GroupHelpListsItsCommands", []string{"help", "migrate"}, 0, []string{"migrate up", "migrate status"}, nil},
		{"UnknownCommandIsAUsageError", []string{"serve"}, 2, nil, []string{`unknown command "serve"`, `Run "bothy --help" for the list of commands.`}},
		{"MistypedGroupSuggestsTheWholeCommand", []string{"webhook", "list"}, 2, nil,
			[]string{`unknown command "webhook"`, "Did you mean this?\n\tbothy webhooks list\n"}},
		{"MistypedCommandInAGroupSuggestsIt", []string{"webhooks", "lst"}, 2, nil, []string{"Did you mean this?\n\tbothy webhooks list\n"}},
		{"UnknownCommandInAGroupPointsAtItsHelp", []string{"webhooks", "bogus"}, 2, nil,
			[]string{`unknown command "webhooks bogus"`, `Run "bothy webhooks --help" for the list of commands.`}},
		{"UnknownFlagIsAUsageError", []string{"webhooks", "list", "--bogus"}, 2, nil, []string{"unknown flag --bogus", `Run "bothy webhooks list --help"`}},
		{"UnknownFlagAfterAnArgumentIsAUsageError", []string{"webhooks", "enable", "x", "--bogus"}, 2, nil, []string{"unknown flag --bogus"}},
		{"BadFlagValueIsAUsageError", []string{"webhooks", "deliveries", "--limit=many", "x"}, 2, nil, []string{`invalid argument "many" for "--limit" flag`}},
		{"MissingArgumentIsAUsageError", []string{"webhooks", "deliveries"}, 2, nil, []string{"takes SUBSCRIPTION_ID, got no arguments"}},
		{"ExtraArgumentIsAUsageError", []string{"consumers", "status", "extra"}, 2, nil, []string{`takes no arguments, got ["extra"]`}},
		{"BadArgumentIsAUsageError", []string{"webhooks", "enable", "not-a-uuid"}, 2, nil, []string{`"not-a-uuid" is not a subscription ID`}},
		{"FailureExitsOneAndNamesTheDatabase", []string{"consumers", "status", unreachableDB}, 1, nil,
			[]string{"bothy consumers status: connect to PostgreSQL at 127.0.0.1:1 (database.url): "}},
		{"BadConfigurationExitsOne", []string{"config", "show", "--consumer.batch_size=lots"}, 1, nil, []string{"consumer.batch_size"}},
		{"Version", []string{"version"}, 0, []string{"bothy " + buildinfo.DevelVersion + " (revision "}, nil},
		{"VersionFlag", []string{"--version"}, 0, []string{"bothy "}, nil},
		{"CompletionBash", []string{"completion", "bash"}, 0, []string{"complete -o default -F __start_bothy bothy", "__complete"}, nil},
		{"CompletionZsh", []string{"completion", "zsh"}, 0, []string{"#compdef bothy", "compdef _bothy bothy", "__complete"}, nil},
		{"CompletionFish", []string{"completion", "fish"}, 0, []string{"complete -c bothy", "__complete"}, nil},
		{"CompletionUnknownShellIsAUsageError", []string{"completion", "tcsh"}, 2, nil, []string{`shell "tcsh": want bash, zsh or fish`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			require.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			for _, want := range tt.stdout {
				require.Contains(t, stdout, want)
			}
			if tt.stderr == nil {
				require.Empty(t, stderr)
			}
			for _, want := range tt.stderr {
				require.Contains(t, stderr, want)
			}
		})
	}
}

// TestCLI_MistypedCommandIsShort: a mistyped command gets the error, the
// suggestion and a pointer to --help, not the whole list of commands.
func TestCLI_MistypedCommandIsShort(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, nil, "webhook", "list")
	require.Equal(t, 2, code)
	require.Empty(t, stdout)
	require.Equal(t, "bothy: unknown command \"webhook\"\n\nDid you mean this?\n\tbothy webhooks list\n\n"+
		"Run \"bothy --help\" for the list of commands.\n", stderr)
}

func TestCLI_GroupListsOnlyItsCommands(t *testing.T) {
	t.Parallel()
	_, stdout, _ := runCLI(t, nil, "webhooks")
	require.NotContains(t, stdout, "authz")
	require.NotContains(t, stdout, "migrate")
}

func TestCLI_VersionJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, nil, "version", "--json")
	require.Equal(t, 0, code, stderr)
	var got buildinfo.Info
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, buildinfo.Read(), got)
}

// TestParseArgs: flags may stand before, after or between the
// arguments, with one dash or two; after "--" everything is an argument.
func TestParseArgs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		args     []string
		pos      []string
		attempts bool
		limit    int
	}{
		{"FlagsBeforeArguments", []string{"--attempts", "--limit", "5", "ID"}, []string{"ID"}, true, 5},
		{"FlagsAfterArguments", []string{"ID", "--attempts", "--limit=5"}, []string{"ID"}, true, 5},
		{"FlagsBetweenArguments", []string{"a", "--limit", "5", "b", "--attempts", "c"}, []string{"a", "b", "c"}, true, 5},
		{"SingleDashFlags", []string{"ID", "-attempts", "-limit=5"}, []string{"ID"}, true, 5},
		{"SingleDashFlagWithItsValueApart", []string{"-limit", "5", "ID"}, []string{"ID"}, false, 5},
		{"AFlagValueThatLooksLikeAFlagStays", []string{"--status", "-attempts", "ID"}, []string{"ID"}, false, 50},
		{"EverythingAfterDoubleDashIsAnArgument", []string{"a", "--", "--attempts", "-x"}, []string{"a", "--attempts", "-x"}, false, 50},
		{"LoneDashIsAnArgument", []string{"-", "--attempts"}, []string{"-"}, true, 50},
		{"NoArguments", nil, []string{}, false, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := newRoot(&env{})
			args := longFlags(root, append([]string{"webhooks", "deliveries"}, tt.args...))
			cmd, rest, err := root.Find(args)
			require.NoError(t, err)
			require.NoError(t, cmd.ParseFlags(rest))
			require.Equal(t, tt.pos, append([]string{}, cmd.Flags().Args()...))
			attempts, _ := cmd.Flags().GetBool("attempts")
			limit, _ := cmd.Flags().GetInt("limit")
			require.Equal(t, tt.attempts, attempts)
			require.Equal(t, tt.limit, limit)
		})
	}
}

// completions asks the command line's completion, as the shell scripts
// do ("bothy __complete WORDS..."), and returns the candidates without
// their descriptions.
func completions(t *testing.T, environ []string, words ...string) []string {
	t.Helper()
	code, stdout, stderr := runCLI(t, environ, append([]string{"__completeNoDesc"}, words...)...)
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.True(t, strings.HasPrefix(lines[len(lines)-1], ":"), "no directive last: %q", stdout)
	return lines[:len(lines)-1]
}

// TestCompletion_Values asks the completion what completes a few command
// lines: commands, flags, and the values of flags and arguments.
func TestCompletion_Values(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		line []string // the words after "bothy", the last one being completed
		want string
	}{
		{"TopLevelCommands", []string{""}, "authz completion config consumers dev events help login logout members migrate principals push restore server tokens version webhooks"},
		{"GroupCommands", []string{"webhooks", "ro"}, "rotate-secret"},
		{"NestedGroupCommands", []string{"authz", "token", ""}, "create revoke"},
		{"OwnFlagAfterAnArgument", []string{"webhooks", "deliveries", "0b0e6f8e-0000-4000-8000-000000000000", "--att"}, "--attempts"},
		{"ConfigurationFlag", []string{"server", "--consumer.batch"}, "--consumer.batch_size"},
		{"NoConfigurationFlagsWhereNotTaken", []string{"version", "--con"}, ""},
		{"Shells", []string{"completion", ""}, "bash fish zsh"},
		{"Policies", []string{"webhooks", "create", "--policy", ""}, "ordered ordered_dead_letter unordered"},
		{"PoliciesOfUpdate", []string{"webhooks", "update", "x", "--policy="}, "ordered ordered_dead_letter unordered"},
		{"DeliveryStatuses", []string{"webhooks", "deliveries", "--status", ""}, "pending delivered dead skipped"},
		{"EnableFrom", []string{"webhooks", "enable", "x", "--from", ""}, "head backlog"},
		{"Rights", []string{"authz", "grant", "--right", ""}, "read write admin"},
		{"ScopesAfterAComma", []string{"authz", "token", "create", "--scopes", "events:read,"},
			"events:read,events:write events:read,webhooks:manage events:read,push:manage events:read,ops:read events:read,principals:manage"},
		{"EventTypesWithoutAServer", []string{"webhooks", "create", "--events", ""}, "*"},
		{"LogFormatsFromTheConfigurationRange", []string{"server", "--log.format", ""}, "text json"},
		{"RolesFromTheConfigurationRange", []string{"server", "--server.role", ""}, "api worker all"},
		{"NoValuesForAFreeFormKey", []string{"server", "--consumer.batch_size", ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, strings.Join(completions(t, nil, tt.line...), " "))
		})
	}
}

// TestCompletion_BashScript runs the generated bash script as bash would
// on a TAB, with the built binary on PATH, so the script's call back into
// the binary is exercised too.
func TestCompletion_BashScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	bin := buildBinary(t)
	_, script, _ := runCLI(t, nil, "completion", "bash")
	// A stand-in for bash-completion's word splitter, which a user's shell
	// loads and the script uses.
	const splitter = `_get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }`

	for _, tt := range []struct {
		name string
		line []string
		want string
	}{
		{"GroupCommand", []string{"bothy", "webhooks", "ro"}, "rotate-secret"},
		{"FlagValue", []string{"bothy", "webhooks", "create", "--policy", "ordered_"}, "ordered_dead_letter"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var words []string
			for _, w := range tt.line {
				words = append(words, "'"+w+"'")
			}
			prog := splitter + "\n" + script + "\nCOMP_WORDS=(" + strings.Join(words, " ") + "); COMP_CWORD=" + strconv.Itoa(len(tt.line)-1) +
				"; __start_bothy; echo \"${COMPREPLY[*]}\"\n"
			cmd := exec.Command(bash, "--norc", "-c", prog)
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.Output() // stderr: compopt outside a real TAB complains
			require.NoError(t, err, "%s", out)
			require.Equal(t, tt.want, strings.TrimSpace(string(out)))
		})
	}
}

// TestTokenScopes_AreAuthzKnownScopes keeps the --scopes help equal to the
// scopes authz accepts: authz.ValidateScopes names them all when refusing
// an unknown one.
func TestTokenScopes_AreAuthzKnownScopes(t *testing.T) {
	t.Parallel()
	require.NoError(t, authz.ValidateScopes(tokenScopes))
	err := authz.ValidateScopes([]string{"no-such-scope"})
	require.Error(t, err)
	m := regexp.MustCompile(`want one of (.*), optionally followed by @SPACE`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	known := strings.Split(m[1], ", ")
	require.ElementsMatch(t, known, tokenScopes)

	_, stdout, _ := runCLI(t, nil, "authz", "token", "create", "--help")
	require.Contains(t, stdout, strings.Join(tokenScopes, ", "))
	require.Contains(t, stdout, authz.ScopeEventsWrite)
}

// TestCLI_JSONOutputParses runs every command that prints a result with
// --json against one database, in an order where each finds what the ones
// before made, and decodes what it prints.
func TestCLI_JSONOutputParses(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true"}

	jsonOf := func(t *testing.T, args ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(t, environ, append(args, "--json")...)
		require.Equal(t, 0, code, "stderr:\n%s", stderr)
		require.True(t, json.Valid([]byte(stdout)), "not JSON:\n%s", stdout)
		var obj map[string]any
		if json.Unmarshal([]byte(stdout), &obj) != nil {
			var arr []any
			require.NoError(t, json.Unmarshal([]byte(stdout), &arr))
			return map[string]any{"items": arr}
		}
		return obj
	}

	principal := jsonOf(t, "authz", "principal", "alice")
	require.Equal(t, map[string]any{"id": "alice", "kind": "user", "created": true}, principal)
	require.Equal(t, "admin", jsonOf(t, "authz", "grant", "--space", "s1", "--principal", "alice", "--right", "admin")["right"])
	token := jsonOf(t, "authz", "token", "create", "--principal", "alice", "--scopes", "events:read,webhooks:manage")
	require.NotEmpty(t, token["secret"])
	sub := jsonOf(t, "webhooks", "create", "--owner", "alice", "--space", "s1", "--url", "http://127.0.0.1:9/hook?key=secret")
	id, _ := sub["id"].(string)
	require.NotEmpty(t, id)
	require.NotEmpty(t, sub["secret"])
	require.Equal(t, "http://127.0.0.1:9/hook?…", sub["url"])
	emitted := jsonOf(t, "events", "emit", "--space", "s1", "--count", "3")
	require.Equal(t, 3.0, emitted["appended"])

	list := jsonOf(t, "webhooks", "list", "--space", "s1")["items"].([]any)
	require.Len(t, list, 1)
	require.Equal(t, id, list[0].(map[string]any)["id"])
	// Flags after the argument, as in "bothy webhooks deliveries ID --attempts".
	require.NotNil(t, jsonOf(t, "webhooks", "deliveries", id, "--attempts", "--limit", "10")["items"])
	require.Empty(t, jsonOf(t, "webhooks", "deliveries", id, "--type", "nothing.*", "--until", "2000-01-01T00:00:00Z")["items"])
	// A time flag takes a duration before now too.
	require.NotNil(t, jsonOf(t, "webhooks", "deliveries", id, "--since", "10m", "--until", "0s")["items"])
	require.NotNil(t, jsonOf(t, "webhooks", "stats", id, "--since", "36h")["intervals"])
	for flag, bad := range map[string]string{"--type": "Bad.*", "--event-id": "nope", "--since": "yesterday"} {
		code, _, stderr := runCLI(t, environ, "webhooks", "deliveries", id, flag, bad)
		require.Equal(t, 2, code, "%s %s is a usage error", flag, bad)
		require.Contains(t, stderr, flag)
	}
	code, _, stderr := runCLI(t, environ, "webhooks", "stats", id, "--until", "-5m")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--until "-5m": want an RFC 3339 time such as 2026-12-01T08:00:00Z, or a duration before now such as 10m`)
	require.Equal(t, 900.0, jsonOf(t, "webhooks", "stats", id, "--step", "15m")["step_seconds"])
	code, _, stderr = runCLI(t, environ, "webhooks", "stats", id, "--step", "1s")
	require.Equal(t, 2, code, "a window the database refuses is a usage error")
	require.Contains(t, stderr, "step")
	rotated := jsonOf(t, "webhooks", "rotate-secret", id, "--overlap=1h")
	require.Equal(t, 3600.0, rotated["overlap_seconds"])
	require.Equal(t, "disabled", jsonOf(t, "webhooks", "disable", id, "--reason", "test")["status"])
	require.Equal(t, "manual", jsonOf(t, "webhooks", "enable", id)["was_cause"])

	require.Equal(t, true, jsonOf(t, "migrate", "status")["current"])
	require.NotEmpty(t, jsonOf(t, "consumers", "status")["items"])
	require.NotEmpty(t, jsonOf(t, "restore", "finalize")["cursors"])
	require.NotEmpty(t, jsonOf(t, "config", "keys")["items"])
	shown := jsonOf(t, "config", "show")["items"].([]any)
	require.True(t, slices.ContainsFunc(shown, func(v any) bool { return v.(map[string]any)["key"] == "database.url" }))
	require.NotEmpty(t, jsonOf(t, "push", "vapid-keys")["push.vapid_public_key"])
	require.Equal(t, true, jsonOf(t, "authz", "token", "revoke", token["id"].(string))["revoked"])
	require.Equal(t, "", jsonOf(t, "authz", "revoke", "--space", "s1", "--principal", "alice")["right"])
	require.Equal(t, false, jsonOf(t, "authz", "principal", "alice")["created"])
	require.Equal(t, buildinfo.Read().Go, jsonOf(t, "version")["go"])
}

func TestAuthzPrincipal_SaysCreatedOrExisted(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL}

	code, stdout, stderr := runCLI(t, environ, "authz", "principal", "bob", "--kind", "app")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "principal bob created (kind app)\n", stdout)
	code, stdout, stderr = runCLI(t, environ, "authz", "principal", "--kind", "user", "bob")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "principal bob already existed (kind app); nothing changed\n", stdout)
}

func TestMigrateUp_SaysWhatItApplied(t *testing.T) {
	t.Parallel()
	u, err := dburl.NewURL(dbtest.ServerURL(t), "bothy_test_cli")
	require.NoError(t, err)
	t.Cleanup(func() { _ = dburl.Drop(context.Background(), u) })
	environ := []string{"BOTHY_DATABASE_URL=" + u, "BOTHY_LOG_LEVEL=warn"}

	code, stdout, stderr := runCLI(t, environ, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `^applied (1 migration: 0001_\w+|\d+ migrations: 0001_\w+(, | … )\d{4}_\w+.*) \(River: 1\.\.\d+\)\n$`, stdout)

	code, stdout, stderr = runCLI(t, environ, "migrate", "up")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `^migrations are current: nothing to apply \(bothy at \d{4}_\w+, River at \d+\)\n$`, stdout)

	code, stdout, stderr = runCLI(t, environ, "migrate", "up", "--json")
	require.Equal(t, 0, code, stderr)
	var res migrateUpJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Empty(t, res.Applied)
	require.Empty(t, res.RiverApplied)
	require.Positive(t, res.RiverVersion)
}

// TestCLI_DatabaseCommandsIgnoreTheCLIsVariables: with the variables bothy
// dev tells the user to export (BOTHY_SERVER, BOTHY_TOKEN) and the other
// variables of the CLI set, the commands on the database still load their
// configuration; an unknown BOTHY_ variable is still refused.
func TestCLI_DatabaseCommandsIgnoreTheCLIsVariables(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_LOG_LEVEL=warn", "BOTHY_SERVER=http://127.0.0.1:1",
		"BOTHY_TOKEN=bothy_not_a_real_token", "BOTHY_CREDENTIALS=" + filepath.Join(t.TempDir(), "credentials")}

	for _, args := range [][]string{{"config", "show"}, {"migrate", "status"}, {"authz", "principal", "carol"}} {
		code, _, stderr := runCLI(t, environ, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
	}
	code, _, stderr := runCLI(t, append(environ, "BOTHY_TOKN=x"), "config", "show")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "environment variable BOTHY_TOKN: no such configuration key")
}
