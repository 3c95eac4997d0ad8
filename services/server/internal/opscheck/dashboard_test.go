package opscheck

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
)

// dashboardDir is ops/dashboards seen from this package.
const dashboardDir = "../../../../ops/dashboards"

// metricName finds metric names in PromQL; every bothy metric has the prefix.
var metricName = regexp.MustCompile(`\bbothy_[a-zA-Z0-9_:]+`)

// consumerMetric names the per-consumer series that must follow $consumer.
var consumerMetric = regexp.MustCompile(`\bbothy_event_consumer_(lag|pending_age_seconds|last_success_timestamp_seconds|rounds_total|round_duration_seconds_bucket|round_events_bucket|round_jobs_bucket|batch_size|events_total|jobs_total|lost_events_total)\b`)

// exportedNames scrapes a role=all server with every feature and returns
// every sample name it exposes (histograms with their _bucket, _sum and
// _count series).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(scrape(t, "all")))
	require.NoError(t, err)
	names := map[string]bool{}
	for name, f := range fams {
		names[name] = true
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = true, true
		}
	}
	return names
}

// query is one PromQL expression of a dashboard and where it is.
type query struct{ where, expr string }

// dashboardQueries walks a dashboard's panels (rows included) and template
// variables.
func dashboardQueries(t *testing.T, d map[string]any) []query {
	t.Helper()
	var out []query
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			pm := p.(map[string]any)
			title, _ := pm["title"].(string)
			require.NotEmpty(t, title, "panel %v has no title", pm["id"])
			if ts, ok := pm["targets"].([]any); ok {
				for _, tg := range ts {
					expr, _ := tg.(map[string]any)["expr"].(string)
					require.NotEmpty(t, expr, "panel %q: target without expr", title)
					out = append(out, query{"panel " + title, expr})
				}
			} else {
				require.Equal(t, "row", pm["type"], "panel %q has no targets", title)
			}
			if sub, ok := pm["panels"].([]any); ok {
				walk(sub)
			}
		}
	}
	panels, ok := d["panels"].([]any)
	require.True(t, ok, "no panels")
	walk(panels)
	tmpl, _ := d["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		vm := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		q := vm["query"]
		if qm, ok := q.(map[string]any); ok {
			q = qm["query"]
		}
		out = append(out, query{"variable " + vm["name"].(string), q.(string)})
	}
	return out
}

func TestDashboards(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(dashboardDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	exported := exportedNames(t)

	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			var d map[string]any
			require.NoError(t, json.Unmarshal(b, &d), "dashboard JSON loads")
			require.NotEmpty(t, d["uid"])
			require.NotEmpty(t, d["title"])

			qs := dashboardQueries(t, d)
			require.NotEmpty(t, qs)
			used := map[string]bool{}
			for _, q := range qs {
				names := metricName.FindAllString(q.expr, -1)
				require.NotEmpty(t, names, "%s: %q queries no bothy_ metric", q.where, q.expr)
				for _, n := range names {
					used[n] = true
					require.True(t, exported[n], "%s: %s is not exported by the server", q.where, n)
				}
				if strings.HasPrefix(q.where, "panel ") && consumerMetric.MatchString(q.expr) {
					require.Contains(t, q.expr, `consumer=~"$consumer"`, "%s: per-consumer query ignores $consumer", q.where)
				}
			}
			require.True(t, used["bothy_event_consumer_lag"] && used["bothy_event_consumer_pending_age_seconds"] &&
				used["bothy_event_consumer_rounds_total"] && used["bothy_event_consumer_round_duration_seconds_bucket"] &&
				used["bothy_webhook_deliveries_total"] && used["bothy_push_deliveries_total"] &&
				used["bothy_webhook_attempt_duration_seconds_bucket"],
				"the dashboard shows lag, pending age, rounds, round duration, deliveries and webhook attempt latency")

			// The PromQL parses: promtool checks it as recording rules, with
			// Grafana's variables replaced by values.
			bin := tooltest.Need(t, tooltest.Promtool) // after the checks above: without promtool only the parse is skipped
			rules := "groups:\n  - name: dashboard\n    rules:\n"
			repl := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$consumer", ".*")
			for i, q := range qs {
				if strings.HasPrefix(q.where, "variable ") {
					continue // label_values() is Grafana's, not PromQL
				}
				e, err := json.Marshal(repl.Replace(q.expr))
				require.NoError(t, err)
				rules += fmt.Sprintf("      - record: dashboard:query%d\n        expr: %s\n", i, e)
			}
			rf := filepath.Join(t.TempDir(), "dashboard.rules.yml")
			require.NoError(t, os.WriteFile(rf, []byte(rules), 0o600))
			out, err := exec.Command(bin, "check", "rules", rf).CombinedOutput()
			require.NoError(t, err, "dashboard PromQL:\n%s", out)
		})
	}
	require.True(t, slices.Contains(files, filepath.Join(dashboardDir, "bothy-consumers.json")))
}
