package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/push"
)

func init() {
	register(command{Name: "push vapid-keys", Summary: "generate a VAPID key pair for push notifications", NoConfig: true, Setup: setupPushVAPIDKeys})
}

// setupPushVAPIDKeys prints a new key pair as configuration lines, ready to
// go into the file given with --config (or into BOTHY_PUSH_VAPID_* variables),
// or with --json as an object keyed by the configuration keys. The private
// key goes to stdout only; keep it out of shell history and logs.
func setupPushVAPIDKeys(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		k, err := push.GenerateVAPIDKeys()
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(map[string]string{"push.vapid_public_key": k.Public, "push.vapid_private_key": k.Private})
		}
		fmt.Fprintln(c.stdout, "# Web Push application server keys (RFC 8292). Clients subscribe with the public key;")
		fmt.Fprintln(c.stdout, "# changing the pair invalidates every existing subscription.")
		fmt.Fprintf(c.stdout, "push.vapid_public_key = %s\n", k.Public)
		fmt.Fprintf(c.stdout, "push.vapid_private_key = %s\n", k.Private)
		return nil
	}
}
