package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func init() {
	register(command{Name: "authz principal", Args: "PRINCIPAL", Summary: "create a principal; an existing one is left as it is", Setup: setupAuthzPrincipal})
	register(command{Name: "authz grant", Summary: "set a principal's right on a space", Setup: setupAuthzGrant})
	register(command{Name: "authz revoke", Summary: "remove a principal's right on a space", Setup: setupAuthzRevoke})
	register(command{Name: "authz token create", Summary: "create a token, printing its secret once", Setup: setupAuthzTokenCreate})
	register(command{Name: "authz token revoke", Args: "TOKEN_ID", Summary: "revoke a token", Setup: setupAuthzTokenRevoke})
}

// tokenScopes are the scopes a token may carry, for the --scopes help.
// TestTokenScopes_AreAuthzKnownScopes fails when authz knows another.
var tokenScopes = []string{authz.ScopeEventsRead, authz.ScopeEventsWrite, authz.ScopeWebhooksManage, authz.ScopePushManage,
	authz.ScopeOpsRead, authz.ScopePrincipalsManage}

// principalJSON is what "bothy authz principal --json" prints.
type principalJSON struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Created bool   `json:"created"`
}

// principalKindSQL reads an existing principal's kind, to tell "created"
// from "already existed".
const principalKindSQL = `SELECT kind FROM principals WHERE id = $1`

func setupAuthzPrincipal(fs *pflag.FlagSet) func(context.Context, *call) error {
	kind := fs.String("kind", "user", "user or app")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		id := c.args[0]
		// In one transaction, so the answer is about this call's insert.
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
		res := principalJSON{ID: id, Kind: *kind}
		err = tx.QueryRow(ctx, principalKindSQL, id).Scan(&res.Kind)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			res.Created = true
			if err := authz.CreatePrincipal(ctx, tx, id, authz.PrincipalKind(*kind)); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("read principal %q: %w", id, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(res)
		}
		if res.Created {
			fmt.Fprintf(c.stdout, "principal %s created (kind %s)\n", id, res.Kind)
		} else {
			fmt.Fprintf(c.stdout, "principal %s already existed (kind %s); nothing changed\n", id, res.Kind)
		}
		return nil
	}
}

// rightJSON is what "bothy authz grant|revoke --json" print; Right is
// empty after a revoke.
type rightJSON struct {
	Principal string `json:"principal"`
	Space     string `json:"space"`
	Right     string `json:"right"`
}

func setupAuthzGrant(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space (required)")
	principal := fs.String("principal", "", "principal (required)")
	right := fs.String("right", "read", "read, write or admin")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := authz.Grant(ctx, pool, &authz.GrantParams{Space: *space, Principal: *principal, Right: authz.Right(*right)}); err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(rightJSON{Principal: *principal, Space: *space, Right: *right})
		}
		fmt.Fprintf(c.stdout, "%s has %s on %s\n", *principal, *right, *space)
		return nil
	}
}

func setupAuthzRevoke(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space (required)")
	principal := fs.String("principal", "", "principal (required)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := authz.Revoke(ctx, pool, *space, *principal); err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(rightJSON{Principal: *principal, Space: *space})
		}
		fmt.Fprintf(c.stdout, "%s has no right on %s; pending deliveries for it will not be sent\n", *principal, *space)
		return nil
	}
}

func setupAuthzTokenCreate(fs *pflag.FlagSet) func(context.Context, *call) error {
	principal := fs.String("principal", "", "owner of the token (required)")
	scopes := fs.String("scopes", "", "comma-separated, each optionally @SPACE (except "+authz.ScopeOpsRead+" and "+authz.ScopePrincipalsManage+", which cover every space): "+strings.Join(tokenScopes, ", "))
	name := fs.String("name", "", "label")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		var sc []string
		for _, s := range strings.Split(*scopes, ",") {
			if s = strings.TrimSpace(s); s != "" {
				sc = append(sc, s)
			}
		}
		t, secret, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: *principal, Scopes: sc, Name: *name})
		if err != nil {
			return err
		}
		if *asJSON {
			v := t.View(time.Now())
			v.Secret = secret
			return c.printJSON(v)
		}
		fmt.Fprintf(c.stdout, "token %s for %s, scopes %s\n", t.ID, *principal, strings.Join(t.Scopes, ","))
		fmt.Fprintf(c.stdout, "bearer secret (shown once): %s\n", secret)
		return nil
	}
}

func setupAuthzTokenRevoke(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := uuid.Parse(c.args[0])
		if err != nil {
			return fmt.Errorf("%w: %q is not a token ID", errUsage, c.args[0])
		}
		_, pool, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := authz.RevokeToken(ctx, pool, id); err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(struct {
				ID      uuid.UUID `json:"id"`
				Revoked bool      `json:"revoked"`
			}{id, true})
		}
		fmt.Fprintf(c.stdout, "token %s revoked\n", id)
		return nil
	}
}
