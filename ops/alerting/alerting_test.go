package alerting

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/ops/promtooltest"
	"go.yaml.in/yaml/v3"
)

func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// ruleFile is the part of a rule file this test reads.
type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
		} `yaml:"rules"`
	} `yaml:"groups"`
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
	bin := promtooltest.Path(t)
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
			var rf ruleFile
			readYAML(t, f, &rf)
			for _, g := range rf.Groups {
				for _, r := range g.Rules {
					if r.Alert == "" {
						continue
					}
					require.True(t, fires[r.Alert], "%s: no promtool case where it fires", r.Alert)
					require.True(t, silent[r.Alert], "%s: no promtool case where it must not fire", r.Alert)
				}
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
