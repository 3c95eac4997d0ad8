package main

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/push"
)

func init() {
	modules = append(modules, push.NewModule)
	register(command{Name: "push vapid-keys", Summary: "generate a VAPID key pair for push notifications", Run: runPushVAPIDKeys})
}

// runPushVAPIDKeys prints a new key pair as configuration lines, ready to
// go into the file given with --config (or into BOTHY_PUSH_VAPID_* variables).
// The private key goes to stdout only; keep it out of shell history and logs.
func runPushVAPIDKeys(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("push vapid-keys", e)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: push vapid-keys takes no arguments", errUsage)
	}
	k, err := push.GenerateVAPIDKeys()
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "# Web Push application server keys (RFC 8292). Clients subscribe with the public key;")
	fmt.Fprintln(e.stdout, "# changing the pair invalidates every existing subscription.")
	fmt.Fprintf(e.stdout, "push.vapid_public_key = %s\n", k.Public)
	fmt.Fprintf(e.stdout, "push.vapid_private_key = %s\n", k.Private)
	return nil
}
