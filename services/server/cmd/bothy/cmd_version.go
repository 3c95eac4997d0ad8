package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/buildinfo"
)

func init() {
	register(command{Name: "version", Summary: "this build: version, VCS revision, Go version (as bothy_build_info)", NoConfig: true, Setup: setupVersion})
}

func setupVersion(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		in := buildinfo.Read()
		if *asJSON {
			return c.printJSON(in)
		}
		fmt.Fprintln(c.stdout, in)
		return nil
	}
}
