package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func init() {
	register(command{Name: "authz principal", Summary: "create a principal (idempotent): ID [--kind user|app]", Run: runAuthzPrincipal})
	register(command{Name: "authz grant", Summary: "set a principal's right on a space: --space --principal --right read|write|admin", Run: runAuthzGrant})
	register(command{Name: "authz revoke", Summary: "remove a principal's right on a space: --space --principal", Run: runAuthzRevoke})
	register(command{Name: "authz token create", Summary: "create a token, printing its secret once: --principal --scopes a,b [--name]", Run: runAuthzTokenCreate})
	register(command{Name: "authz token revoke", Summary: "revoke a token: ID", Run: runAuthzTokenRevoke})
}

func runAuthzPrincipal(ctx context.Context, e *env, args []string) error {
	var kind string
	_, pool, rest, err := dbCommand(ctx, e, "authz principal", args, func(fs *flag.FlagSet) {
		fs.StringVar(&kind, "kind", "user", "user or app")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(rest) != 1 {
		return fmt.Errorf("%w: authz principal takes one principal ID", errUsage)
	}
	if err := authz.CreatePrincipal(ctx, pool, rest[0], authz.PrincipalKind(kind)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "principal %s exists\n", rest[0])
	return nil
}

func runAuthzGrant(ctx context.Context, e *env, args []string) error {
	var space, principal, right string
	_, pool, _, err := dbCommand(ctx, e, "authz grant", args, func(fs *flag.FlagSet) {
		fs.StringVar(&space, "space", "", "space (required)")
		fs.StringVar(&principal, "principal", "", "principal (required)")
		fs.StringVar(&right, "right", "read", "read, write or admin")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := authz.Grant(ctx, pool, &authz.GrantParams{Space: space, Principal: principal, Right: authz.Right(right)}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s has %s on %s\n", principal, right, space)
	return nil
}

func runAuthzRevoke(ctx context.Context, e *env, args []string) error {
	var space, principal string
	_, pool, _, err := dbCommand(ctx, e, "authz revoke", args, func(fs *flag.FlagSet) {
		fs.StringVar(&space, "space", "", "space (required)")
		fs.StringVar(&principal, "principal", "", "principal (required)")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := authz.Revoke(ctx, pool, space, principal); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s has no right on %s; pending deliveries for it will not be sent\n", principal, space)
	return nil
}

func runAuthzTokenCreate(ctx context.Context, e *env, args []string) error {
	var principal, scopes, name string
	_, pool, _, err := dbCommand(ctx, e, "authz token create", args, func(fs *flag.FlagSet) {
		fs.StringVar(&principal, "principal", "", "owner of the token (required)")
		fs.StringVar(&scopes, "scopes", "", "comma-separated: events:read, webhooks:manage, push:manage, each optionally @SPACE")
		fs.StringVar(&name, "name", "", "label")
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	var sc []string
	for _, s := range strings.Split(scopes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			sc = append(sc, s)
		}
	}
	t, secret, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: principal, Scopes: sc, Name: name})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "token %s for %s, scopes %s\n", t.ID, principal, strings.Join(t.Scopes, ","))
	fmt.Fprintf(e.stdout, "bearer secret (shown once): %s\n", secret)
	return nil
}

func runAuthzTokenRevoke(ctx context.Context, e *env, args []string) error {
	_, pool, rest, err := dbCommand(ctx, e, "authz token revoke", args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(rest) != 1 {
		return fmt.Errorf("%w: authz token revoke takes one token ID", errUsage)
	}
	id, err := uuid.Parse(rest[0])
	if err != nil {
		return fmt.Errorf("%w: %q is not a token ID", errUsage, rest[0])
	}
	if err := authz.RevokeToken(ctx, pool, id); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "token %s revoked\n", id)
	return nil
}
