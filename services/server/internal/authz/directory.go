package authz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The directory: what principals, memberships and tokens exist, for the
// admin API and the CLI. Reads only; who may see what is decided by the
// caller (admin.go has the rules).

// Principal is a stored principal.
type Principal struct {
	ID         string
	Kind       PrincipalKind
	CreatedAt  time.Time
	DisabledAt *time.Time
}

// Membership is a principal's right on a space.
type Membership struct {
	Space     string
	Principal string
	Right     Right
	GrantedAt time.Time
}

const principalColumns = `id, kind, created_at, disabled_at`

func scanPrincipal(row pgx.CollectableRow) (Principal, error) {
	var p Principal
	err := row.Scan(&p.ID, &p.Kind, &p.CreatedAt, &p.DisabledAt)
	return p, err
}

// GetPrincipal reads one principal; ErrNotFound if there is none.
func GetPrincipal(ctx context.Context, q Querier, id string) (*Principal, error) {
	rows, err := q.Query(ctx, `SELECT `+principalColumns+` FROM principals WHERE id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("read principal %q: %w", id, err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPrincipal)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("principal %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read principal %q: %w", id, err)
	}
	return &p, nil
}

// ListPrincipalsParams selects a page of principals in id order.
type ListPrincipalsParams struct {
	// AfterID, if set, lists only principals whose id sorts after it.
	AfterID string
	// Limit is the most returned. Required.
	Limit int
}

// ListPrincipals lists principals in id order (the primary key's), so a
// walk by AfterID sees each principal that existed when it started exactly
// once.
func ListPrincipals(ctx context.Context, q Querier, p *ListPrincipalsParams) ([]Principal, error) {
	rows, err := q.Query(ctx, `SELECT `+principalColumns+` FROM principals
WHERE id > $1 ORDER BY id LIMIT $2`, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list principals: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanPrincipal)
	if err != nil {
		return nil, fmt.Errorf("list principals: %w", err)
	}
	return out, nil
}

// maxMembershipsShown bounds the memberships Memberships returns; a
// space's members are paged (Members), a principal's spaces are few.
const maxMembershipsShown = 1000

// Memberships lists the rights of one principal, by space, at most the
// first 1000.
func Memberships(ctx context.Context, q Querier, principal string) ([]Membership, error) {
	rows, err := q.Query(ctx, `SELECT space, principal, "right"::text, granted_at FROM space_members
WHERE principal = $1 ORDER BY space LIMIT $2`, principal, maxMembershipsShown)
	if err != nil {
		return nil, fmt.Errorf("list memberships of %q: %w", principal, err)
	}
	return collectMemberships(rows)
}

// MembersParams selects a page of a space's members in principal order.
type MembersParams struct {
	Space string
	// AfterPrincipal, if set, lists only members whose id sorts after it.
	AfterPrincipal string
	// Limit is the most returned. Required.
	Limit int
}

// Members lists a space's members in principal order.
func Members(ctx context.Context, q Querier, p *MembersParams) ([]Membership, error) {
	rows, err := q.Query(ctx, `SELECT space, principal, "right"::text, granted_at FROM space_members
WHERE space = $1 AND principal > $2 ORDER BY principal LIMIT $3`, p.Space, p.AfterPrincipal, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list members of %q: %w", p.Space, err)
	}
	return collectMemberships(rows)
}

func collectMemberships(rows pgx.Rows) ([]Membership, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Membership, error) {
		var m Membership
		err := row.Scan(&m.Space, &m.Principal, &m.Right, &m.GrantedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list memberships: %w", err)
	}
	return out, nil
}

// ListTokensParams selects a page of one principal's tokens.
type ListTokensParams struct {
	Principal string
	// AfterID, if not nil, lists only tokens after it. Token ids are
	// UUIDv7, so id order is creation order.
	AfterID uuid.UUID
	// Limit is the most returned. Required.
	Limit int
}

// ListTokens lists a principal's tokens, revoked and expired ones too,
// oldest first, without their secrets (only a hash is stored, and it is
// not read).
func ListTokens(ctx context.Context, q Querier, p *ListTokensParams) ([]Token, error) {
	rows, err := q.Query(ctx, `SELECT id, principal, scopes, name, created_at, expires_at, revoked_at, last_used_at
FROM tokens WHERE principal = $1 AND id > $2 ORDER BY id LIMIT $3`, p.Principal, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list tokens of %q: %w", p.Principal, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Token, error) {
		var t Token
		err := row.Scan(&t.ID, &t.Principal, &t.Scopes, &t.Name, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens of %q: %w", p.Principal, err)
	}
	return out, nil
}
