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

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/ops/promtooltest"
	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// idleConsumer stands in for the real consumers (webhooks, push: their
// cursor rows come with the baseline migration), so the worker runs
// rounds and exports its per-consumer series.
type idleConsumer struct{ name string }

func (c idleConsumer) Name() string { return c.name }

func (idleConsumer) Handle(context.Context, pgx.Tx, []sync.Event) ([]sync.Job, error) {
	return nil, nil
}

type idleModule struct{}

func (idleModule) Consumers() []sync.Consumer {
	return []sync.Consumer{idleConsumer{"webhooks"}, idleConsumer{"push"}}
}
func (idleModule) RegisterWorkers(*river.Workers) []module.Queue { return nil }
func (idleModule) Routes(*http.ServeMux, *river.Client[pgx.Tx])  {}

// scrape starts "bothy server" with role on a fresh database, waits until
// its /metrics shows what the role exports and returns the exposition text.
func scrape(t *testing.T, role string) string {
	t.Helper()
	db := dbtest.NewDB(t)
	cfg, err := config.Load("", nil, map[string]string{
		"database.url":       db.URL,
		"server.listen_addr": "127.0.0.1:0",
		"server.role":        role,
	})
	require.NoError(t, err)
	srv := app.NewServer(cfg, slog.New(slog.DiscardHandler),
		[]module.Factory{func(*module.Deps) (module.Module, error) { return idleModule{}, nil }})
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
	bin := promtooltest.Path(t)
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
