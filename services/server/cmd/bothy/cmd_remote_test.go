package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// remoteBundle is a running server (role all, real database), a token of
// principal alice (admin of s1, every scope) and the CLI's environment to
// reach it: no database URL, and a credentials file of its own.
type remoteBundle struct {
	db      *dbtest.DB
	base    string
	token   string
	environ []string
}

func setupRemote(t *testing.T, extra ...string) *remoteBundle {
	t.Helper()
	db := dbtest.NewDB(t)
	flags := apptest.Flags(db.URL, "all")
	for i := 0; i+1 < len(extra); i += 2 {
		flags[extra[i]] = extra[i+1]
	}
	b := &remoteBundle{db: db, base: apptest.Start(t, flags)}
	b.token = apptest.Principal(t, db.Pool, "alice", authz.RightAdmin, "s1", append(apptest.AllScopes, authz.ScopeOpsRead))
	b.environ = []string{"BOTHY_SERVER=" + b.base, "BOTHY_TOKEN=" + b.token, "BOTHY_CREDENTIALS=" + filepath.Join(t.TempDir(), "credentials")}
	return b
}

// cli runs the CLI in b's environment and requires exit code want.
func (b *remoteBundle) cli(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, b.environ, args...)
	require.Equal(t, want, code, "bothy %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
	return stdout, stderr
}

// jsonOf runs the CLI with --json and decodes what it prints into out.
func (b *remoteBundle) jsonOf(t *testing.T, out any, args ...string) {
	t.Helper()
	stdout, _ := b.cli(t, 0, append(args, "--json")...)
	require.NoError(t, json.Unmarshal([]byte(stdout), out), "%s", stdout)
}

// TestCLI_ServerModeNeedsNoDatabase runs the built binary as a user on
// another machine would: an environment with no database URL at all, the
// server and the token as flags before the command.
func TestCLI_ServerModeNeedsNoDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	b := setupRemote(t)
	b.jsonOf(t, &webhooks.SubscriptionView{}, "webhooks", "create", "--space", "s1", "--url", "http://127.0.0.1:9/hook")

	cmd := exec.Command(bin, "--server", b.base, "--token", b.token, "webhooks", "list")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "http://127.0.0.1:9/hook")
	require.Contains(t, string(out), "alice")
}

// TestCLI_WebhooksThroughTheServer runs every webhooks command through the
// HTTP API and checks that each prints the API's answer.
func TestCLI_WebhooksThroughTheServer(t *testing.T) {
	t.Parallel()
	b := setupRemote(t)
	rv, _ := recvtest.Endpoint(t, webhookstest.Status(http.StatusNoContent))

	var sub webhooks.SubscriptionView
	b.jsonOf(t, &sub, "webhooks", "create", "--space", "s1", "--url", rv+"?key=secret", "--policy", "unordered",
		"--header", "X-Tenant: acme-tenant")
	require.Equal(t, "alice", sub.Owner, "the token's principal owns it")
	require.NotNil(t, sub.TokenID, "the calling token bounds the deliveries")
	require.NotEmpty(t, sub.Secret)
	require.Equal(t, rv+"?…", sub.URL)
	require.Equal(t, map[string]string{"X-Tenant": "********"}, sub.Headers)
	id := sub.ID.String()

	var list []webhooks.SubscriptionView
	b.jsonOf(t, &list, "webhooks", "list", "--space", "s1")
	require.Len(t, list, 1)
	stdout, _ := b.cli(t, 0, "webhooks", "list")
	require.Contains(t, stdout, id)
	require.Contains(t, stdout, "unordered/10")

	stdout, _ = b.cli(t, 0, "webhooks", "update", id, "--policy", "ordered", "--max-rps", "5")
	require.Contains(t, stdout, "policy ordered,5/s")
	stdout, _ = b.cli(t, 0, "webhooks", "test", id)
	require.Contains(t, stdout, "receiver answered 204")

	stdout, _ = b.cli(t, 0, "events", "emit", "--space", "s1", "--count", "3", "--concurrency", "2")
	require.Contains(t, stdout, "appended 3 events to space s1")
	var sts []sync.ConsumerStatusJSON
	b.jsonOf(t, &sts, "consumers", "status")
	require.NotEmpty(t, sts)

	var ds []webhooks.DeliveryView
	b.jsonOf(t, &ds, "webhooks", "deliveries", id, "--limit", "10")
	for _, d := range ds {
		require.Nil(t, d.AttemptList, "attempts only with --attempts")
	}
	// The filters go to the API as they are: a match of nothing, and the
	// API's refusals naming the parameter.
	b.jsonOf(t, &ds, "webhooks", "deliveries", id, "--type", "nothing.*", "--since", "2000-01-01T00:00:00Z")
	require.Empty(t, ds)
	_, stderr := b.cli(t, 1, "webhooks", "deliveries", id, "--type", "Bad.*")
	require.Contains(t, stderr, "type")
	_, stderr = b.cli(t, 1, "webhooks", "deliveries", id, "--event-id", "nope")
	require.Contains(t, stderr, "event_id")

	var disabled webhooks.SubscriptionView
	b.jsonOf(t, &disabled, "webhooks", "disable", id, "--reason", "maintenance")
	require.Equal(t, "manual", disabled.DisabledCause)
	var enabled webhooks.EnableView
	b.jsonOf(t, &enabled, "webhooks", "enable", id, "--from", "backlog")
	require.Equal(t, "manual", enabled.WasCause)
	require.Equal(t, "active", enabled.Subscription.Status)
	var rotated webhooks.RotateView
	b.jsonOf(t, &rotated, "webhooks", "rotate-secret", id, "--overlap", "1h")
	require.EqualValues(t, 3600, rotated.OverlapSeconds)
	var recovered map[string]any
	b.jsonOf(t, &recovered, "webhooks", "recover", id, "--from-seq", "1")
	require.Equal(t, id, recovered["id"])

	var deleted map[string]any
	b.jsonOf(t, &deleted, "webhooks", "delete", id)
	require.Equal(t, map[string]any{"id": id, "deleted": true}, deleted, "the API does not count the delivery records")
	_, stderr = b.cli(t, 1, "webhooks", "delete", id)
	require.Contains(t, stderr, "no such webhook subscription (HTTP 404)")
}

// TestCLI_WebhooksStatsThroughTheServer: webhooks stats prints the API's
// statistics, as a table with a total or as its answer with --json, and
// relays the API's refusal of a window.
func TestCLI_WebhooksStatsThroughTheServer(t *testing.T) {
	t.Parallel()
	b := setupRemote(t)
	rv, _ := recvtest.Endpoint(t, webhookstest.Status(http.StatusNoContent))
	var sub webhooks.SubscriptionView
	b.jsonOf(t, &sub, "webhooks", "create", "--space", "s1", "--url", rv)
	id := sub.ID.String()
	b.cli(t, 0, "events", "emit", "--space", "s1", "--count", "3")
	require.Eventually(t, func() bool {
		var ds []webhooks.DeliveryView
		b.jsonOf(t, &ds, "webhooks", "deliveries", id, "--status", "delivered")
		return len(ds) == 3
	}, 30*time.Second, 100*time.Millisecond)

	since := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	until := since.Add(2 * time.Hour)
	window := []string{"--since", since.Format(time.RFC3339), "--until", until.Format(time.RFC3339), "--step", "30m"}
	var v webhooks.StatsView
	b.jsonOf(t, &v, append([]string{"webhooks", "stats", id}, window...)...)
	require.Equal(t, sub.ID, v.SubscriptionID)
	require.EqualValues(t, 1800, v.StepSeconds)
	require.Len(t, v.Intervals, 4)
	require.EqualValues(t, 3, v.OK)
	require.Zero(t, v.Failed)

	stdout, _ := b.cli(t, 0, append([]string{"webhooks", "stats", id}, window...)...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 1+4+1, "%s", stdout)
	require.Equal(t, []string{"START", "OK", "FAILED", "P50", "P95", "SUCCESS_RATE"}, strings.Fields(lines[0]))
	require.Equal(t, since.Format(time.RFC3339), strings.Fields(lines[1])[0])
	require.Equal(t, []string{"total", "3", "0", "100.0%"}, strings.Fields(lines[5]))

	// A duration before now, resolved by the CLI: the API takes RFC 3339.
	b.jsonOf(t, &v, "webhooks", "stats", id, "--since", "2h", "--step", "30m")
	require.EqualValues(t, 3, v.OK)
	var ds []webhooks.DeliveryView
	b.jsonOf(t, &ds, "webhooks", "deliveries", id, "--since", "10m")
	require.Len(t, ds, 3)
	b.jsonOf(t, &ds, "webhooks", "deliveries", id, "--until", "10m")
	require.Empty(t, ds)

	_, stderr := b.cli(t, 1, "webhooks", "stats", id, "--step", "soon")
	require.Contains(t, stderr, "step")
}

// TestCLI_ServerModeRefusals: what only the database can do is refused as
// a usage error naming why, and the server's refusals are relayed.
func TestCLI_ServerModeRefusals(t *testing.T) {
	t.Parallel()
	b := setupRemote(t, "webhooks.allow_private_targets", "false")

	_, stderr := b.cli(t, 1, "webhooks", "create", "--space", "s1", "--url", "http://127.0.0.1:9/hook")
	require.Contains(t, stderr, "webhooks.allow_private_targets = true", "the server's decision, relayed")
	require.Contains(t, stderr, "(HTTP 422)")
	_, stderr = b.cli(t, 2, "webhooks", "create", "--owner", "bob", "--space", "s1", "--url", "https://hooks.example.com/")
	require.Contains(t, stderr, "--owner needs the database")
	_, stderr = b.cli(t, 2, "webhooks", "list", "--owner", "bob")
	require.Contains(t, stderr, "--owner needs the database")
	_, stderr = b.cli(t, 2, "events", "emit", "--space", "s1", "--actor", "bob")
	require.Contains(t, stderr, "--actor needs the database")
	_, stderr = b.cli(t, 2, "migrate", "status", "--server", b.base)
	require.Contains(t, stderr, "does not run through the HTTP API")
	_, stderr = b.cli(t, 1, "events", "emit", "--space", "s2")
	require.Contains(t, stderr, "(HTTP 403)", "no right on s2")

	code, _, stderr := runCLI(t, []string{"BOTHY_SERVER=" + b.base, "BOTHY_CREDENTIALS=" + filepath.Join(t.TempDir(), "none")}, "webhooks", "list")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no token for "+b.base)
	code, _, stderr = runCLI(t, []string{"BOTHY_SERVER=" + b.base, "BOTHY_TOKEN=wrong"}, "webhooks", "list")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "(HTTP 401)")
	code, _, stderr = runCLI(t, nil, "webhooks", "list", "--server", "ftp://x")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `server "ftp://x": want a base URL`)
}

// TestCLI_Login: the token is read from stdin, checked with the server and
// saved readable by its owner only; later commands find it by the server's
// URL; logout forgets it. The token is never printed.
func TestCLI_Login(t *testing.T) {
	t.Parallel()
	b := setupRemote(t)
	creds := filepath.Join(t.TempDir(), "bothy", "credentials")
	environ := []string{"BOTHY_SERVER=" + b.base + "/", "BOTHY_CREDENTIALS=" + creds}
	login := func(token string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(t.Context(), []string{"login"}, &env{stdin: strings.NewReader(token + "\n"), stdout: &out, stderr: &errOut, environ: environ})
		return code, out.String(), errOut.String()
	}

	code, _, stderr := login("not-a-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "refused the token")
	_, err := os.Stat(creds)
	require.ErrorIs(t, err, os.ErrNotExist, "a refused token is not saved")

	code, stdout, stderr := login(b.token)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout+stderr, b.token)
	st, err := os.Stat(creds)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	code, stdout, stderr = runCLI(t, environ, "webhooks", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "ID")
	code, stdout, stderr = runCLI(t, environ, "logout")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "removed")
	code, _, stderr = runCLI(t, environ, "webhooks", "list")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no token for "+b.base)
}

// TestCompletion_SubscriptionIDsFromTheServer: with a server named, the
// subscription ID argument completes from the server's list.
func TestCompletion_SubscriptionIDsFromTheServer(t *testing.T) {
	t.Parallel()
	b := setupRemote(t)
	var sub webhooks.SubscriptionView
	b.jsonOf(t, &sub, "webhooks", "create", "--space", "s1", "--url", "http://127.0.0.1:9/hook")
	require.Equal(t, []string{sub.ID.String()}, completions(t, b.environ, "webhooks", "deliveries", ""))
	require.Equal(t, []string{sub.ID.String()}, completions(t, b.environ, "webhooks", "enable", sub.ID.String()[:4]))
	require.Empty(t, completions(t, b.environ, "webhooks", "enable", "zz"))
}

// TestCLI_AdminThroughTheServer makes a principal, its right and its
// token over HTTP only, and takes them away again.
func TestCLI_AdminThroughTheServer(t *testing.T) {
	t.Parallel()
	b := setupRemote(t)
	b.environ[1] = "BOTHY_TOKEN=" + apptest.Principal(t, b.db.Pool, "root", authz.RightAdmin, "s1",
		[]string{authz.ScopePrincipalsManage, authz.ScopeEventsRead, authz.ScopeWebhooksManage})

	var bob authz.PrincipalView
	b.jsonOf(t, &bob, "principals", "create", "bob")
	require.Equal(t, "user", bob.Kind)
	stdout, _ := b.cli(t, 0, "principals", "create", "bob")
	require.Contains(t, stdout, "already existed")
	var all []authz.PrincipalView
	b.jsonOf(t, &all, "principals", "list")
	require.Len(t, all, 3, "alice, bob and root")

	var m authz.MembershipView
	b.jsonOf(t, &m, "members", "set", "--space", "s1", "--principal", "bob", "--right", "read")
	require.Equal(t, authz.MembershipView{Space: "s1", Principal: "bob", Right: "read", GrantedAt: m.GrantedAt}, m)
	var members []authz.MembershipView
	b.jsonOf(t, &members, "members", "list", "--space", "s1")
	require.Len(t, members, 3)
	var tok authz.TokenView
	b.jsonOf(t, &tok, "tokens", "create", "--principal", "bob", "--scopes", "events:read@s1", "--name", "ci")
	require.NotEmpty(t, tok.Secret)
	stdout, _ = b.cli(t, 0, "tokens", "list", "--principal", "bob")
	require.Contains(t, stdout, tok.ID.String())
	require.NotContains(t, stdout, tok.Secret)

	asBob := []string{"BOTHY_SERVER=" + b.base, "BOTHY_TOKEN=" + tok.Secret}
	code, stdout, stderr := runCLI(t, asBob, "principals", "get", "bob")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "read on s1")
	code, _, stderr = runCLI(t, asBob, "principals", "list")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "principals:manage (HTTP 403)")
	// A member reads the space's members; only an admin changes them.
	code, stdout, stderr = runCLI(t, asBob, "members", "list", "--space", "s1", "--json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &members), "%s", stdout)
	require.Len(t, members, 3)
	code, _, stderr = runCLI(t, asBob, "members", "set", "--space", "s1", "--principal", "bob", "--right", "admin")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "(HTTP 403)")
	code, _, stderr = runCLI(t, asBob, "members", "list", "--space", "s2")
	require.Equal(t, 1, code, "a space bob has no right on")
	require.Contains(t, stderr, "(HTTP 403)")

	b.cli(t, 0, "tokens", "revoke", tok.ID.String())
	code, _, stderr = runCLI(t, asBob, "principals", "get", "bob")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "(HTTP 401)")
	b.cli(t, 0, "members", "remove", "--space", "s1", "--principal", "bob")
	b.jsonOf(t, &members, "members", "list", "--space", "s1")
	require.Len(t, members, 2)
}

// TestCLI_AdminOnTheDatabase: the same commands work on the database, as
// the operator.
func TestCLI_AdminOnTheDatabase(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL}
	jsonOf := func(out any, args ...string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, environ, append(args, "--json")...)
		require.Equal(t, 0, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), out), "%s", stdout)
	}
	var p authz.PrincipalView
	jsonOf(&p, "principals", "create", "ci", "--kind", "app")
	require.Equal(t, "app", p.Kind)
	var m authz.MembershipView
	jsonOf(&m, "members", "set", "--space", "s1", "--principal", "ci", "--right", "write")
	require.Equal(t, "write", m.Right)
	jsonOf(&p, "principals", "get", "ci")
	require.Equal(t, []authz.MembershipView{{Space: "s1", Principal: "ci", Right: "write", GrantedAt: (*p.Spaces)[0].GrantedAt}}, *p.Spaces)
	var tok authz.TokenView
	jsonOf(&tok, "tokens", "create", "--principal", "ci", "--scopes", "events:write@s1", "--expires-in", "1h")
	require.NotNil(t, tok.ExpiresAt)
	var toks []authz.TokenView
	jsonOf(&toks, "tokens", "list", "--principal", "ci", "--limit", "1")
	require.Len(t, toks, 1)
	require.Empty(t, toks[0].Secret)
	jsonOf(&map[string]any{}, "tokens", "revoke", tok.ID.String())
	jsonOf(&toks, "tokens", "list", "--principal", "ci")
	require.Equal(t, authz.TokenRevoked, toks[0].Status)
}

// TestCompletion_EventTypesFromTheServer: --events completes, after the
// types already given, the other types the server lists for --space or
// the updated subscription's space. The server here stands in for GET
// /v1/spaces/{space}/event-types, with its answer's shape.
func TestCompletion_EventTypesFromTheServer(t *testing.T) {
	t.Parallel()
	const subID = "0b0e6f8e-0000-4000-8000-000000000000"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("Authorization") != "Bearer t0ken":
			http.Error(w, "{}", http.StatusUnauthorized)
		case r.URL.Path == "/v1/spaces/s1/event-types":
			_, _ = w.Write([]byte(`{"event_types":[{"type":"item.created","count":3},{"type":"item.deleted","count":1}]}`))
		case r.URL.Path == "/v1/webhooks/"+subID:
			_, _ = w.Write([]byte(`{"id":"` + subID + `","space":"s1"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	environ := []string{"BOTHY_SERVER=" + srv.URL, "BOTHY_TOKEN=t0ken"}

	require.Equal(t, []string{"*", "item.created", "item.deleted"}, completions(t, environ, "webhooks", "create", "--space", "s1", "--events", ""))
	require.Equal(t, []string{"item.created,*", "item.created,item.deleted"},
		completions(t, environ, "webhooks", "update", subID, "--events", "item.created,"), "the subscription's space, less what is given")
	require.Equal(t, []string{"*"}, completions(t, environ, "webhooks", "create", "--space", "s2", "--events", ""), "a space it does not list")
	require.Equal(t, []string{"*"}, completions(t, nil, "webhooks", "create", "--space", "s1", "--events", ""), "no server")
}
