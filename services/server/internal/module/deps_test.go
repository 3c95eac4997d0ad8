package module_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestFeaturesDependOnPortsOnly keeps the features off the composition root
// and the framework's adapter: a feature that imports them (even through
// another package) reaches tables, configuration and start-up code it must
// not depend on.
func TestFeaturesDependOnPortsOnly(t *testing.T) {
	const internal = "github.com/bothy/bothy/services/server/internal/"
	forbidden := []string{
		internal + "app",
		internal + "config",
		internal + "dbmigrate",
		internal + "dburl",
		internal + "sync/adapters/postgres",
		"github.com/bothy/bothy/migrations",
	}
	for _, feature := range []string{"webhooks", "push", "httpapi", "console"} {
		out, err := exec.Command("go", "list", "-deps", internal+feature).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", feature, err)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, f := range forbidden {
			if deps[f] {
				t.Errorf("%s depends on %s", feature, f)
			}
		}
	}
}
