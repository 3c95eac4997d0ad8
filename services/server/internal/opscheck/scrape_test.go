package opscheck

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
)

// scrape starts "bothy server" with role on a fresh database, waits until
// its /metrics shows what the role exports and returns the exposition text.
func scrape(t *testing.T, role string) string {
	t.Helper()
	db := dbtest.NewDB(t)
	// Push registers its metrics only when it has a VAPID key pair.
	keys, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	cfg, err := config.Load("", nil, map[string]string{
		"database.url":           db.URL,
		"server.listen_addr":     "127.0.0.1:0",
		"server.role":            role,
		"push.vapid_public_key":  keys.Public,
		"push.vapid_private_key": keys.Private,
	})
	require.NoError(t, err)
	// The features every bothy server runs, so the scrape has every metric
	// they register.
	srv := app.NewServer(cfg, slog.New(slog.DiscardHandler), app.Features(cfg))
	base := apptest.Run(t, srv)

	// The worker registers its round metrics after the listener starts and
	// initializes a consumer's series when its loop starts: wait for them.
	want := []string{"bothy_event_consumer_lag{", "bothy_server_role{"}
	if role != "api" {
		want = append(want, `bothy_event_consumer_rounds_total{consumer="push"`, `bothy_event_consumer_rounds_total{consumer="webhooks"`,
			// River's metrics, once the maintenance job River runs at start
			// was counted.
			`bothy_river_jobs{kind="event_log.maintain",queue="default"`, `bothy_river_job_runs_total{kind="event_log.maintain"`)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, err := get(context.Background(), base+"/metrics")
		missing := ""
		for _, w := range want {
			if err == nil && !strings.Contains(body, w) {
				missing = w
			}
		}
		if err == nil && missing == "" {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics of role %s: error %v, missing %q", role, err, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return string(b), nil
}

// TestMetricsLint pipes a real scrape of each role into
// "promtool check metrics", the linter Prometheus ships.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	bin := tooltest.Need(t, tooltest.Promtool)
	for _, role := range []string{"api", "worker"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			body := scrape(t, role)
			cmd := exec.Command(bin, "check", "metrics")
			cmd.Stdin = strings.NewReader(body)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "promtool check metrics on role %s:\n%s", role, out)
		})
	}
}
