package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad gives one key a fuzzed value, as a flag and as an environment
// variable: Load must never panic, an error must name the key, and a value
// it accepts must be reported back from the source it came from.
func FuzzLoad(f *testing.F) {
	bad := []string{"", " ", "-1", "0", "1e309", "99999999999999999999", "1h1h", "-5s", "nan", "\x00", "true\n",
		"postgres://", "http://x/y", "host:", ":99999", "héllo", strings.Repeat("9", 400)}
	for i, k := range Keys {
		f.Add(uint(i), k.Default)
		f.Add(uint(i), k.Range)
		f.Add(uint(i), bad[i%len(bad)])
	}
	f.Fuzz(func(t *testing.T, i uint, value string) {
		k := Keys[i%uint(len(Keys))]
		for _, src := range []string{SourceFlag, SourceEnv} {
			var cfg *Config
			var err error
			if src == SourceFlag {
				cfg, err = Load("", nil, map[string]string{k.Name: value})
			} else {
				cfg, err = Load("", []string{EnvName(k.Name) + "=" + value}, nil)
			}
			if err != nil {
				if cfg != nil {
					t.Fatalf("%s=%q: error %v with a configuration", k.Name, value, err)
				}
				// Either the value is refused (naming the key) or a rule
				// that relates several keys is (naming both).
				if !strings.Contains(err.Error(), k.Name) && !strings.Contains(err.Error(), "must") {
					t.Fatalf("%s=%q: error does not name the key: %v", k.Name, value, err)
				}
				continue
			}
			got, from := cfg.Value(k.Name)
			if got != value || from != src {
				t.Fatalf("%s=%q: Value says %q from %s", k.Name, value, got, from)
			}
		}
	})
}

// FuzzLoadFile feeds a fuzzed configuration file to Load: it must never
// panic, and an error must name the file.
func FuzzLoadFile(f *testing.F) {
	f.Add("consumer.batch_size = 10\n# comment\n\nlog.level = \"debug\"\n")
	f.Add("nokey\n")
	f.Add("unknown.key = 1\n")
	f.Add("webhooks.timeout = \"\\x\"\n")
	f.Add("database.url = postgres://u@h/db\nserver.role=api")
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "bothy.conf")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, nil, nil)
		if err != nil {
			if cfg != nil {
				t.Fatalf("error %v with a configuration", err)
			}
			if !strings.Contains(err.Error(), "config file") && !strings.Contains(err.Error(), "(from file)") &&
				!strings.Contains(err.Error(), "must") {
				t.Fatalf("error does not say it came from the file: %v", err)
			}
		}
	})
}
