package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// The principals, tokens and members commands: the admin API's, through
// it with --server (where its rules apply: principals:manage, an admin of
// the space), or on the database as the operator. The authz commands stay
// the database's bootstrap of the first principal and token.
func init() {
	for _, c := range []command{
		{Name: "principals create", Args: "PRINCIPAL", Summary: "create a principal; an existing one of the same kind is left as it is", Setup: setupPrincipalsCreate},
		{Name: "principals list", Summary: "every principal, in id order", Setup: setupPrincipalsList},
		{Name: "principals get", Args: "PRINCIPAL", Summary: "a principal with its rights on spaces", Setup: setupPrincipalsGet},
		{Name: "tokens create", Summary: "create a token for a principal, printing its secret once", Setup: setupTokensCreate},
		{Name: "tokens list", Summary: "a principal's tokens, oldest first, without secrets", Setup: setupTokensList},
		{Name: "tokens revoke", Args: "TOKEN_ID", Summary: "revoke a token for good", Setup: setupTokensRevoke},
		{Name: "members list", Summary: "a space's members and their rights", Setup: setupMembersList},
		{Name: "members set", Summary: "set a principal's right on a space", Setup: setupMembersSet},
		{Name: "members remove", Summary: "remove a principal from a space", Setup: setupMembersRemove},
	} {
		c.Remote = true
		register(c)
	}
}

// pageFlags define --limit and --cursor of a list command.
func pageFlags(fs *pflag.FlagSet) *pageQuery {
	q := &pageQuery{}
	fs.IntVar(&q.Limit, "limit", 0, "at most this many; more are announced on stderr with their --cursor (0: the server's page, 50)")
	fs.StringVar(&q.Cursor, "cursor", "", "start after the page that announced this cursor")
	return q
}

// required refuses the run when a flag is empty; nameValues are pairs of
// a flag's name and its value.
func required(nameValues ...string) error {
	for i := 0; i+1 < len(nameValues); i += 2 {
		if nameValues[i+1] == "" {
			return fmt.Errorf("%w: --%s is required", errUsage, nameValues[i])
		}
	}
	return nil
}

func setupPrincipalsCreate(fs *pflag.FlagSet) func(context.Context, *call) error {
	kind := fs.String("kind", "user", "user or app")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		p, created, err := svc.CreatePrincipal(ctx, &authz.CreatePrincipalRequest{ID: c.args[0], Kind: *kind})
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(p)
		}
		if created {
			fmt.Fprintf(c.stdout, "principal %s created (kind %s)\n", p.ID, p.Kind)
		} else {
			fmt.Fprintf(c.stdout, "principal %s already existed (kind %s); nothing changed\n", p.ID, p.Kind)
		}
		return nil
	}
}

func setupPrincipalsList(fs *pflag.FlagSet) func(context.Context, *call) error {
	q := pageFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		pg, err := svc.Principals(ctx, q)
		if err != nil {
			return err
		}
		return printPage(c, *asJSON, pg.Principals, pg.NextCursor, "ID\tKIND\tCREATED\tDISABLED", func(p *authz.PrincipalView) string {
			return strings.Join([]string{p.ID, p.Kind, p.CreatedAt.UTC().Format(time.RFC3339), timeOr(p.DisabledAt, "-")}, "\t")
		})
	}
}

// printPage prints a page of items, as JSON or as a table of header and a
// row per item (tab-separated cells), and announces the next page's cursor
// on stderr.
func printPage[T any](c *call, asJSON bool, items []T, next, header string, row func(*T) string) error {
	defer c.moreFollow(next)
	if asJSON {
		return c.printJSON(items)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for i := range items {
		fmt.Fprintln(tw, row(&items[i]))
	}
	return tw.Flush()
}

func timeOr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func setupPrincipalsGet(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		p, err := svc.Principal(ctx, c.args[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(p)
		}
		fmt.Fprintf(c.stdout, "principal %s (kind %s), created %s\n", p.ID, p.Kind, p.CreatedAt.UTC().Format(time.RFC3339))
		if p.Spaces != nil {
			for _, m := range *p.Spaces {
				fmt.Fprintf(c.stdout, "  %s on %s\n", m.Right, m.Space)
			}
		}
		return nil
	}
}

func setupTokensCreate(fs *pflag.FlagSet) func(context.Context, *call) error {
	principal := fs.String("principal", "", "owner of the token (required)")
	scopes := fs.String("scopes", "", "comma-separated, each optionally @SPACE (except "+authz.ScopeOpsRead+" and "+authz.ScopePrincipalsManage+
		", which cover every space): "+strings.Join(tokenScopes, ", ")+"; through --server at most the calling token's")
	name := fs.String("name", "", "label")
	expires := fs.Duration("expires-in", 0, "the token ends this long from now (0: never, or when the calling token ends)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if err := required("principal", *principal); err != nil {
			return err
		}
		sc := splitList(*scopes)
		req := &authz.CreateTokenRequest{Scopes: &sc, Name: *name}
		if *expires > 0 {
			at := time.Now().Add(*expires).UTC().Truncate(time.Second)
			req.ExpiresAt = &at
		}
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		t, err := svc.CreateToken(ctx, *principal, req)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(t)
		}
		fmt.Fprintf(c.stdout, "token %s for %s, scopes %s, expires %s\n", t.ID, t.Principal, strings.Join(t.Scopes, ","), timeOr(t.ExpiresAt, "never"))
		fmt.Fprintf(c.stdout, "bearer secret (shown once): %s\n", t.Secret)
		return nil
	}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func setupTokensList(fs *pflag.FlagSet) func(context.Context, *call) error {
	principal := fs.String("principal", "", "owner of the tokens (required)")
	q := pageFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if err := required("principal", *principal); err != nil {
			return err
		}
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		pg, err := svc.Tokens(ctx, *principal, q)
		if err != nil {
			return err
		}
		return printPage(c, *asJSON, pg.Tokens, pg.NextCursor, "ID\tSTATUS\tNAME\tSCOPES\tCREATED\tEXPIRES\tLAST_USED", func(t *authz.TokenView) string {
			return strings.Join([]string{t.ID.String(), t.Status, t.Name, strings.Join(t.Scopes, ","), t.CreatedAt.UTC().Format(time.RFC3339),
				timeOr(t.ExpiresAt, "never"), timeOr(t.LastUsedAt, "never")}, "\t")
		})
	}
}

func setupTokensRevoke(fs *pflag.FlagSet) func(context.Context, *call) error {
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := uuid.Parse(c.args[0])
		if err != nil {
			return fmt.Errorf("%w: %q is not a token ID", errUsage, c.args[0])
		}
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		if err := svc.RevokeToken(ctx, id); err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(map[string]any{"id": id, "revoked": true})
		}
		fmt.Fprintf(c.stdout, "token %s revoked\n", id)
		return nil
	}
}

func setupMembersList(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space (required)")
	q := pageFlags(fs)
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		if err := required("space", *space); err != nil {
			return err
		}
		svc, done, err := c.admin(ctx)
		if err != nil {
			return err
		}
		defer done()
		pg, err := svc.Members(ctx, *space, q)
		if err != nil {
			return err
		}
		return printPage(c, *asJSON, pg.Members, pg.NextCursor, "PRINCIPAL\tRIGHT\tGRANTED", func(m *authz.MembershipView) string {
			return strings.Join([]string{m.Principal, m.Right, m.GrantedAt.UTC().Format(time.RFC3339)}, "\t")
		})
	}
}

func setupMembersSet(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space (required)")
	principal := fs.String("principal", "", "principal (required)")
	right := fs.String("right", "read", "read, write or admin")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		return setMember(ctx, c, *space, *principal, authz.Right(*right), *asJSON)
	}
}

func setupMembersRemove(fs *pflag.FlagSet) func(context.Context, *call) error {
	space := fs.String("space", "", "space (required)")
	principal := fs.String("principal", "", "principal (required)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		return setMember(ctx, c, *space, *principal, "", *asJSON)
	}
}

// setMember gives principal right on space, or removes it for right "",
// and prints the right it has now: the membership as the API answers it,
// or with --json after a removal the principal and space with an empty
// right, as "authz revoke --json" prints them.
func setMember(ctx context.Context, c *call, space, principal string, right authz.Right, asJSON bool) error {
	if err := required("space", space, "principal", principal); err != nil {
		return err
	}
	svc, done, err := c.admin(ctx)
	if err != nil {
		return err
	}
	defer done()
	m, err := svc.SetMember(ctx, space, principal, right)
	if err != nil {
		return err
	}
	if asJSON && m != nil {
		return c.printJSON(m)
	}
	if asJSON {
		return c.printJSON(rightJSON{Principal: principal, Space: space})
	}
	if m == nil {
		fmt.Fprintf(c.stdout, "%s has no right on %s; pending deliveries for it will not be sent\n", principal, space)
	} else {
		fmt.Fprintf(c.stdout, "%s has %s on %s\n", principal, right, space)
	}
	return nil
}
