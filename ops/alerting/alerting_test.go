package alerting

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"go.yaml.in/yaml/v3"
)

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// alertRule is the part of a rule this test reads.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Annotations map[string]string `yaml:"annotations"`
}

// ruleFile is the part of a rule file this test reads.
type ruleFile struct {
	Groups []struct {
		Rules []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

// alerts returns the alerting rules of the rule file f (recording rules
// have no alert name).
func alerts(t *testing.T, f string) []alertRule {
	t.Helper()
	var rf ruleFile
	readYAML(t, f, &rf)
	var out []alertRule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// testFile is the part of a promtool test file this test reads.
type testFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin := tooltest.Need(t, tooltest.Promtool)
	rules, err := filepath.Glob("*.rules.yml")
	require.NoError(t, err)
	require.NotEmpty(t, rules)
	tests, err := filepath.Glob("*.test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, tests)

	t.Run("CheckRules", func(t *testing.T) {
		t.Parallel()
		runPromtool(t, bin, append([]string{"check", "rules"}, rules...)...)
	})

	t.Run("TestRules", func(t *testing.T) {
		t.Parallel()
		runPromtool(t, bin, append([]string{"test", "rules"}, tests...)...)
	})

	// Every alert has a case where it fires and one where it must not, and
	// every rule file is loaded by a test file (house style rule 18).
	t.Run("EveryAlertIsTestedFiringAndNotFiring", func(t *testing.T) {
		t.Parallel()
		fires, silent := map[string]bool{}, map[string]bool{}
		var tested []string
		for _, f := range tests {
			var tf testFile
			readYAML(t, f, &tf)
			tested = append(tested, tf.RuleFiles...)
			for _, tc := range tf.Tests {
				for _, a := range tc.AlertRuleTest {
					if len(a.ExpAlerts) > 0 {
						fires[a.Alertname] = true
					} else {
						silent[a.Alertname] = true
					}
				}
			}
		}
		for _, f := range rules {
			require.True(t, slices.Contains(tested, f), "rule file %s is in no test file's rule_files", f)
			for _, r := range alerts(t, f) {
				require.True(t, fires[r.Alert], "%s: no promtool case where it fires", r.Alert)
				require.True(t, silent[r.Alert], "%s: no promtool case where it must not fire", r.Alert)
			}
		}
	})
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), path)
}

// runbookURL is every alert's runbook_url before its fragment: the external
// label runbook_base_url of the Prometheus evaluating the rule, else the
// runbooks on the repository's main branch (ops/alerting.md, "Runbook links").
const runbookURL = `{{ with $externalLabels.runbook_base_url }}{{ . }}{{ else }}` + defaultRunbooks + `{{ end }}`

const defaultRunbooks = "https://github.com/bothy/bothy/blob/main/ops/alerting.md"

// expandAnnotation expands an annotation as Prometheus does for an alert:
// text/template with $labels, $externalLabels, $externalURL and $value
// defined first. It lets the test render runbook_url with external labels,
// which Debian's promtool cannot set in a test file.
func expandAnnotation(t *testing.T, text string, externalLabels map[string]string) string {
	t.Helper()
	const defs = `{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}`
	tmpl, err := template.New("annotation").Parse(defs + text)
	require.NoError(t, err, text)
	var b strings.Builder
	data := struct {
		Labels, ExternalLabels map[string]string
		ExternalURL            string
		Value                  float64
	}{map[string]string{}, externalLabels, "https://prometheus.example.com", 1}
	require.NoError(t, tmpl.Execute(&b, data), text)
	return b.String()
}

// TestRunbookLinks: every alert's runbook_url is absolute, built from the
// configurable base, and points at the alert's own section of
// ops/alerting.md, with the runbook_base_url label and without it.
func TestRunbookLinks(t *testing.T) {
	t.Parallel()
	rules, err := filepath.Glob("*.rules.yml")
	require.NoError(t, err)
	doc, err := os.ReadFile("../alerting.md")
	require.NoError(t, err)
	const base = "https://runbooks.example.com/bothy/alerting.html"
	for _, f := range rules {
		for _, r := range alerts(t, f) {
			anchor := strings.ToLower(r.Alert)
			require.Equal(t, runbookURL+"#"+anchor, r.Annotations["runbook_url"], "%s: runbook_url", r.Alert)
			require.Contains(t, string(doc), "\n## "+r.Alert+"\n", "%s: no section in ops/alerting.md", r.Alert)
			for _, c := range []struct {
				external map[string]string
				want     string
			}{
				{nil, defaultRunbooks + "#" + anchor},
				{map[string]string{"cluster": "eu-1"}, defaultRunbooks + "#" + anchor},
				{map[string]string{"runbook_base_url": base}, base + "#" + anchor},
			} {
				got := expandAnnotation(t, r.Annotations["runbook_url"], c.external)
				require.Equal(t, c.want, got, "%s with external labels %v", r.Alert, c.external)
				u, err := url.Parse(got)
				require.NoError(t, err)
				require.True(t, u.IsAbs() && u.Host != "", "%s: %q is not absolute", r.Alert, got)
			}
		}
	}
}
