package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/loadtest/harness"
	"github.com/bothy/bothy/services/server/loadtest/webhookhandoff"
)

func TestMain(m *testing.M) {
	// The load test starts its receiver and producer as children of this
	// test binary.
	harness.RunChild(webhookhandoff.ChildRoles())
	os.Exit(m.Run())
}

// TestWebhookHandoffShort runs the load test in its short mode (3 s at 100
// events/s over 8 subscriptions, 2 of them unordered) as a deployment: the
// built binary as separate api and worker processes on a private cluster,
// producers POSTing over HTTP. It requires every delivery to arrive once
// with a verified signature, in seq order on the ordered subscriptions,
// the output to name the processes it started, and the JSON line to carry
// every figure. The p95 verdict against perf.webhook_handoff_p95 is
// logged, not asserted: under "go test ./..." the load test shares two
// cores with every other package's tests, and timing figures belong to the
// tool's own run (go run ./perf/webhook_handoff), which exits non-zero above
// the budget. It needs the PostgreSQL server binaries; without them it
// skips, except under CI=true (tooltest.Need).
func TestWebhookHandoffShort(t *testing.T) {
	tooltest.Need(t, tooltest.PostgresServer)
	dir := t.TempDir()
	out, err := harness.RunForTest(t, webhookhandoff.Run, webhookhandoff.ErrP95OverBudget, "--short", "--json", "--out", dir)
	require.NoError(t, err)
	require.Regexp(t, `bothy server --role=api pid \d+`, out)
	require.Regexp(t, `1 x bothy server --role=worker, pids \d+`, out)
	require.Contains(t, out, "POSTing to http://")
	line := lastJSON(t, out)
	requireDeployment(t, line)
	require.EqualValues(t, 300, line["deliveries"])
	for _, k := range []string{"latency_from_send_ms", "latency_from_ack_ms"} {
		q, ok := line[k].(map[string]any)
		require.True(t, ok, "%s is an object", k)
		for _, p := range []string{"p50", "p95", "p99", "max"} {
			require.IsType(t, float64(0), q[p], k+"."+p)
		}
	}
}

// TestWebhookHandoffBrokerShort runs the short hand-off as a deployment
// with each broker kind's destinations: each subscription publishes to an
// address of its own under the run's exchange, stream, keys or topics, and
// the receiver consumes them all. It requires every delivery to arrive
// once with a verified signature, in seq order on the ordered
// subscriptions, and the JSON line to carry every figure and the
// destination. Redis runs with ordered subscriptions only, the one policy
// its destinations take. It needs the PostgreSQL server binaries and the
// broker; without them it skips, except under CI=true (tooltest.Need).
func TestWebhookHandoffBrokerShort(t *testing.T) {
	tooltest.Need(t, tooltest.PostgresServer)
	for _, tt := range []struct {
		kind string
		tool *tooltest.Tool
		args []string
	}{
		{"rabbitmq", tooltest.RabbitMQ, nil},
		{"jetstream", tooltest.NATS, nil},
		{"redis", tooltest.Redis, []string{"--unordered", "0"}},
		{"mqtt", tooltest.MQTT, nil},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			broker := tooltest.Need(t, tt.tool)
			args := append([]string{"--short", "--json", "--out", t.TempDir(), "--destination", tt.kind, "--broker-url", broker}, tt.args...)
			out, err := harness.RunForTest(t, webhookhandoff.Run, webhookhandoff.ErrP95OverBudget, args...)
			require.NoError(t, err)
			require.Contains(t, out, "destination "+tt.kind+", the run's own ")
			line := lastJSON(t, out)
			requireDeployment(t, line)
			require.Equal(t, tt.kind, line["destination"])
			require.EqualValues(t, 300, line["deliveries"])
			require.GreaterOrEqual(t, line["requests"], float64(300), "a message per delivery, the warm-up's included")
		})
	}
}

// TestWebhookHandoffInProcessShort runs the short hand-off with the worker
// in the load test's process (--in-process) and requires the same
// deliveries, the summary and the histogram.
func TestWebhookHandoffInProcessShort(t *testing.T) {
	dir := t.TempDir()
	out, err := harness.RunForTest(t, webhookhandoff.Run, webhookhandoff.ErrP95OverBudget, "--in-process", "--short", "--json", "--out", dir)
	require.NoError(t, err)
	// events, deliveries, four quantiles, then missing, duplicates,
	// out-of-order and bad signatures, all zero.
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+300\s+300\s+(\S+\s+){4}0\s+0\s+0\s+0$`), out)
	require.FileExists(t, filepath.Join(dir, "webhook_handoff.txt"))
	require.FileExists(t, filepath.Join(dir, "webhook_handoff.png"))
	line := lastJSON(t, out)
	requireFigures(t, line, false)
	require.Contains(t, line, "p95_ms")
}

// TestWebhookHandoffBacklogShort drains a small backlog (20 events for each
// of 8 subscriptions, 2 unordered), appended over HTTP while no worker
// runs, with one worker process, once as the subscriptions come and once
// with max_batch on the ordered ones (JSON array bodies), and requires
// every delivery to arrive once, signed, in order where ordered, and the
// JSON line to carry every figure. It needs the PostgreSQL server
// binaries; without them it skips, except under CI=true (tooltest.Need).
func TestWebhookHandoffBacklogShort(t *testing.T) {
	tooltest.Need(t, tooltest.PostgresServer)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"AsSubscribed", nil},
		{"MaxBatch", []string{"--max-batch", "7"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--backlog", "20", "--subscriptions", "8", "--spaces", "2", "--unordered", "2",
				"--json", "--statements", "--drain", "60s"}, tt.args...)
			out, err := harness.RunForTest(t, webhookhandoff.Run, nil, args...)
			require.NoError(t, err)
			line := lastJSON(t, out)
			requireDeployment(t, line)
			require.Equal(t, "backlog", line["mode"])
			require.EqualValues(t, 160, line["deliveries"])
			if strings.Contains(out, "pg_stat_statements loaded") {
				require.IsType(t, float64(0), line["statements_per_delivery"])
			}
		})
	}
}

// requireDeployment requires the figures of a deployment-mode JSON line
// and its checks at 0.
func requireDeployment(t *testing.T, line map[string]any) {
	t.Helper()
	for _, k := range []string{"api_cpu_ms_per_event", "worker_cpu_ms_per_delivery", "postgres_cpu_ms_per_event",
		"receiver_cpu_ms_per_delivery", "all_in_cpu_ms_per_event", "transactions_per_delivery", "wal_bytes_per_event",
		"worker_cold_start_s", "deliveries_per_s", "seconds"} {
		require.IsType(t, float64(0), line[k], k)
	}
	by, ok := line["postgres_cpu_ms_per_event_by"].(map[string]any)
	require.True(t, ok, "postgres_cpu_ms_per_event_by is an object")
	require.Contains(t, by, "api")
	require.Contains(t, by, "worker")
	for _, k := range []string{"missing", "duplicates", "order_violations", "bad_signatures", "unexpected"} {
		require.EqualValues(t, 0, line[k], k)
	}
	require.Greater(t, line["deliveries"], float64(0))
}

// lastJSON parses the output's last line as a JSON object.
func lastJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &line), "the last line is the JSON line")
	return line
}

// requireFigures requires every figure in the JSON line, the checks at 0,
// and, on a private server, the WAL and PostgreSQL CPU.
func requireFigures(t *testing.T, line map[string]any, private bool) {
	t.Helper()
	for _, k := range []string{"deliveries", "seconds", "deliveries_per_s", "db_round_trips_per_delivery",
		"transactions_per_delivery", "river_jobs_per_delivery"} {
		require.IsType(t, float64(0), line[k], k)
	}
	for _, k := range []string{"missing", "duplicates", "order_violations", "bad_signatures"} {
		require.EqualValues(t, 0, line[k], k)
	}
	require.Contains(t, line, "wal_bytes_per_delivery")
	cpu, ok := line["cpu_ms_per_delivery"].(map[string]any)
	require.True(t, ok, "cpu_ms_per_delivery is an object")
	for _, k := range []string{"worker", "postgres", "receiver"} {
		require.Contains(t, cpu, k)
	}
	require.Greater(t, line["deliveries"], float64(0))
	if private {
		require.IsType(t, float64(0), line["wal_bytes_per_delivery"])
		require.IsType(t, float64(0), cpu["postgres"])
	}
}
