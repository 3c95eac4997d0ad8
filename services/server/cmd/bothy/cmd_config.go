package main

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/config"
)

func init() {
	register(command{Name: "config keys", Summary: "every configuration key with default, range and meaning", Run: func(ctx context.Context, e *env, args []string) error {
		config.Describe(e.stdout)
		return nil
	}})
	register(command{Name: "config show", Summary: "the effective configuration and where each value came from", Run: func(ctx context.Context, e *env, args []string) error {
		fs := newFlagSet("config show", e)
		load := configFlags(fs, e)
		if err := fs.Parse(args); err != nil {
			return err
		}
		cfg, err := load()
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		cfg.Print(e.stdout)
		return nil
	}})
}
