package main

import (
	"context"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/config"
)

func init() {
	register(command{Name: "config keys", Summary: "every configuration key with default, range and meaning", NoConfig: true, Setup: setupConfigKeys})
	register(command{Name: "config show", Summary: "the effective configuration and where each value came from", Setup: setupConfigShow})
}

// configKeyJSON is one key in "bothy config keys --json".
type configKeyJSON struct {
	Name    string `json:"name"`
	Default string `json:"default"`
	Range   string `json:"range"`
	Env     string `json:"env"`
	Doc     string `json:"doc"`
	Secret  bool   `json:"secret"`
}

func setupConfigKeys(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if !*asJSON {
			config.Describe(c.stdout)
			return nil
		}
		keys := []configKeyJSON{}
		for _, k := range config.Keys {
			keys = append(keys, configKeyJSON{Name: k.Name, Default: k.Default, Range: k.Range, Env: config.EnvName(k.Name), Doc: k.Doc, Secret: k.Secret})
		}
		return c.printJSON(keys)
	}
}

// configValueJSON is one key in "bothy config show --json". A secret's
// value is left out; Hidden says it is set.
type configValueJSON struct {
	Key    string  `json:"key"`
	Value  *string `json:"value"`
	Hidden bool    `json:"hidden,omitempty"`
	Source string  `json:"source"`
}

func setupConfigShow(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		cfg, err := c.config()
		if err != nil {
			return err
		}
		if !*asJSON {
			cfg.Print(c.stdout)
			return nil
		}
		vals := []configValueJSON{}
		for _, k := range config.Keys {
			v, src := cfg.Value(k.Name)
			kv := configValueJSON{Key: k.Name, Source: src}
			switch {
			case k.Secret && v != "":
				kv.Hidden = true
			case k.Name == "database.url":
				v = redactedDBURL(v)
				kv.Value = &v
			default:
				kv.Value = &v
			}
			vals = append(vals, kv)
		}
		return c.printJSON(vals)
	}
}

// redactedDBURL hides the password in a database URL, as config show does.
func redactedDBURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
