package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// syncBuffer is an io.Writer the test can read while bothy dev writes.
type syncBuffer struct {
	mu gosync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitOutput polls out until it matches re, or fails after d.
func waitOutput(t *testing.T, out *syncBuffer, re *regexp.Regexp, n int, d time.Duration) [][]string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindAllStringSubmatch(out.String(), -1); len(m) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %d× %s; output:\n%s", d, n, re, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the output with a deadline
	}
}

var (
	verifiedLine = regexp.MustCompile(`webhook seq=(\d+) type=item\.created .*\(signature verified`)
	consoleLine  = regexp.MustCompile(`console +(http://\S+/console/)`)
	serverLine   = regexp.MustCompile(`export BOTHY_SERVER=(\S+) BOTHY_TOKEN=(\S+)`)
	databaseLine = regexp.MustCompile(`export BOTHY_DATABASE_URL='(\S+)' BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=(\S+)`)
	adminLine    = regexp.MustCompile(`admin token (\S+)`)
	curlLine     = regexp.MustCompile(`curl -sS -X POST (\S+) -H 'Authorization: Bearer (\S+)' -H 'Content-Type: application/json' -d '(.*)'`)
)

// TestDev_ComesUpDeliversSignedWebhooksAndStopsCleanly runs "bothy dev" as
// a user would (through the command table) against a test database given
// by BOTHY_DATABASE_URL: the demo events reach the built-in receiver with
// verified signatures, the printed curl line works and delivers too, and
// cancelling (Ctrl-C) stops everything with exit code 0.
func TestDev_ComesUpDeliversSignedWebhooksAndStopsCleanly(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	out, errOut := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"dev", "--addr=127.0.0.1:0", "--dir=" + t.TempDir()},
			&env{stdout: out, stderr: errOut, environ: []string{"BOTHY_DATABASE_URL=" + db.URL}})
	}()

	got := waitOutput(t, out, verifiedLine, 3, 2*time.Minute)
	require.Equal(t, []string{"1", "2", "3"}, []string{got[0][1], got[1][1], got[2][1]})
	require.Contains(t, out.String(), "from your configuration")
	for _, want := range []string{"/v1/openapi.json", "/metrics", "/admin/river/", "/console/"} {
		require.Contains(t, out.String(), want)
	}

	sendCurlLine(t, out.String())
	got = waitOutput(t, out, verifiedLine, 4, time.Minute)
	require.Equal(t, "4", got[3][1])
	require.Contains(t, out.String(), "hello from curl")

	// The printed console URL serves the sign-in page.
	cm := consoleLine.FindStringSubmatch(out.String())
	require.NotNil(t, cm, "no console line in:\n%s", out.String())
	res, err := http.Get(cm[1] + "sign-in")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	requireBannerLinksExist(t, out.String())
	requireCLIAgreesWithDev(t, out.String())
	requireAdminTokenOnboards(t, out.String())

	cancel()
	select {
	case c := <-code:
		require.Equal(t, 0, c, "stderr:\n%s", errOut.String())
	case <-time.After(time.Minute):
		t.Fatalf("bothy dev did not stop; output:\n%s", out.String())
	}
	require.Contains(t, out.String(), "bothy dev: stopped")
	require.NotContains(t, errOut.String(), "level=ERROR")
	t.Logf("bothy dev: up, 4 verified deliveries and stopped in %s", time.Since(start).Round(time.Millisecond))
}

// sendCurlLine sends the curl line bothy dev printed, as curl would, and
// requires a 201.
func sendCurlLine(t *testing.T, out string) {
	t.Helper()
	m := curlLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no curl line in:\n%s", out)
	req, err := http.NewRequest("POST", m[1], strings.NewReader(m[3]))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m[2])
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode, "%s", body)
}

// requireBannerLinksExist GETs every URL of the server that bothy dev's
// list of where everything is names, and requires none to be a 404.
func requireBannerLinksExist(t *testing.T, out string) {
	t.Helper()
	sm := serverLine.FindStringSubmatch(out)
	require.NotNil(t, sm, "no server line in:\n%s", out)
	head, _, ok := strings.Cut(out, "Append an event")
	require.True(t, ok, "no list in:\n%s", out)
	links := 0
	for _, u := range bannerURL.FindAllString(head, -1) {
		if !strings.HasPrefix(u, sm[1]+"/") {
			continue // the built-in receiver takes POST requests only
		}
		res, err := http.Get(u)
		require.NoError(t, err)
		res.Body.Close()
		require.NotEqual(t, http.StatusNotFound, res.StatusCode, "%s is printed but answers 404", u)
		links++
	}
	require.GreaterOrEqual(t, links, 4, "the API, metrics, River UI and console are listed")
}

var bannerURL = regexp.MustCompile(`http://[^\s)]+`)

// requireCLIAgreesWithDev runs the CLI as bothy dev's output says, through
// the server and on the database: both accept a loopback target, as bothy
// dev's server does, and the database way without the printed setting is
// refused with the setting's name.
func requireCLIAgreesWithDev(t *testing.T, out string) {
	t.Helper()
	sm, dm := serverLine.FindStringSubmatch(out), databaseLine.FindStringSubmatch(out)
	require.NotNil(t, sm, "no server line in:\n%s", out)
	require.NotNil(t, dm, "no database line in:\n%s", out)
	create := []string{"webhooks", "create", "--space", devSpace, "--url", "http://127.0.0.1:9/from-the-cli"}

	code, stdout, stderr := runCLI(t, []string{"BOTHY_SERVER=" + sm[1], "BOTHY_TOKEN=" + sm[2]}, create...)
	require.Equal(t, 0, code, "through the server: %s%s", stdout, stderr)
	dbEnv := []string{"BOTHY_DATABASE_URL=" + dm[1], "BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=" + dm[2]}
	code, stdout, stderr = runCLI(t, dbEnv, append(create, "--owner", devPrincipal)...)
	require.Equal(t, 0, code, "on the database: %s%s", stdout, stderr)

	code, _, stderr = runCLI(t, dbEnv[:1], append(create, "--owner", devPrincipal)...)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "webhooks.allow_private_targets = true")
}

// requireAdminTokenOnboards onboards a tenant over HTTP as bothy dev's
// output says, with the admin token it printed: a principal, its admin
// right on a space of its own and a token, which then appends to that
// space. The demo token may not create principals.
func requireAdminTokenOnboards(t *testing.T, out string) {
	t.Helper()
	sm, am := serverLine.FindStringSubmatch(out), adminLine.FindStringSubmatch(out)
	require.NotNil(t, am, "no admin token line in:\n%s", out)
	base, demo, admin := sm[1], sm[2], am[1]
	call := func(token, method, path, body string, want int) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, want, res.StatusCode, "%s %s: %s", method, path, raw)
		return raw
	}

	call(demo, "POST", "/v1/principals", `{"id":"acme"}`, http.StatusForbidden)
	call(admin, "POST", "/v1/principals", `{"id":"acme"}`, http.StatusCreated)
	call(admin, "PUT", "/v1/spaces/acme/members/acme", `{"right":"admin"}`, http.StatusOK)
	var tok struct {
		Secret string `json:"secret"`
	}
	raw := call(admin, "POST", "/v1/principals/acme/tokens", `{"scopes":["events:read","events:write","webhooks:manage"]}`, http.StatusCreated)
	require.NoError(t, json.Unmarshal(raw, &tok))
	require.NotEmpty(t, tok.Secret)
	call(tok.Secret, "POST", "/v1/spaces/acme/events", `{"events":[{"type":"item.created","data":{}}]}`, http.StatusCreated)
	call(tok.Secret, "POST", "/v1/spaces/demo/events", `{"events":[{"type":"item.created","data":{}}]}`, http.StatusForbidden)
}
