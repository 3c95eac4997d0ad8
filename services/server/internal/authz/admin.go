package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The rules of administration over the API: who may create principals,
// mint and revoke tokens, and change a space's members. The bootstrap CLI
// writes the tables directly and is bound by none of them.
//
//   - principals:manage (a token scope, global) creates principals, lists
//     them, and mints tokens for any principal. A minted token carries only
//     scopes the minting token carries (a space-restricted one is covered
//     by the bare scope or by the same restriction) and expires no later
//     than it, so no token grows out of another.
//   - A principal reads itself, and lists and revokes its own tokens, with
//     any token of its own (revoking only takes power away); another's
//     principal and tokens need principals:manage.
//   - A space's members are changed with principals:manage by an admin of
//     the space: the grant is the act that widens what a principal may do,
//     so it needs both the space's highest right and the scope that marks a
//     token as an administrator's. Tokens handed to customers
//     (webhooks:manage, events:read) never change membership, even when
//     their principal is admin of its space. Since an admin holds the
//     highest right, nobody grants more than they hold, and nobody but an
//     admin changes any right, their own included.
//   - A space's members are listed by any member of it (read or more),
//     through a token that acts on the space: one of its scopes is for the
//     space (bare, or restricted to it) or it carries principals:manage.
//     Listing widens nothing, and members see who else shares their space;
//     a token restricted to another space, or only for the server's state
//     (ops:read), does not.
//   - A space without members does not exist yet; its first member is
//     set by a holder of principals:manage (typically the provisioning
//     backend making itself or its customer admin), the one grant that
//     needs no right on the space.

// ErrForbidden is returned by MintToken and SetMember when the caller may
// not do what it asks; the wrapping error says why, naming no secret.
var ErrForbidden = errors.New("forbidden")

// ManagesPrincipals reports whether s's token carries principals:manage.
func ManagesPrincipals(s *Subject) bool {
	return slices.Contains(s.Scopes, ScopePrincipalsManage)
}

// MayAdminister reports whether s may read principal, list its tokens and
// revoke them: its own, or any with principals:manage.
func MayAdminister(s *Subject, principal string) bool {
	return s.Principal == principal || ManagesPrincipals(s)
}

// holds reports whether held carries want: a bare scope needs the bare
// scope, "scope@space" the bare scope or the same restriction.
func holds(held []string, want string) bool {
	base, space, restricted := strings.Cut(want, "@")
	if restricted {
		return Covers(held, base, space)
	}
	return slices.Contains(held, base)
}

// maxTokenName bounds a token's label.
const maxTokenName = 200

// MintTokenParams asks for a token on behalf of By.
type MintTokenParams struct {
	// By is the caller: its token must carry principals:manage and every
	// scope asked for.
	By *Subject
	CreateTokenParams
}

// MintToken creates a token for p.Principal if p.By may mint it, and
// returns it with its bearer secret, shown once. Without an expiry the
// token expires with the caller's token, if that one expires.
func MintToken(ctx context.Context, q Querier, p *MintTokenParams) (*Token, string, error) {
	if !ManagesPrincipals(p.By) {
		return nil, "", fmt.Errorf("%w: minting tokens needs a token with scope %s", ErrForbidden, ScopePrincipalsManage)
	}
	if err := ValidateScopes(p.Scopes); err != nil {
		return nil, "", err
	}
	for _, s := range p.Scopes {
		if !holds(p.By.Scopes, s) {
			return nil, "", fmt.Errorf("%w: scope %q: the calling token does not carry it, and a token cannot hand out more than it has", ErrForbidden, s)
		}
	}
	if len(p.Name) > maxTokenName {
		return nil, "", fmt.Errorf("name: %w: %d bytes, at most %d", ErrInvalid, len(p.Name), maxTokenName)
	}
	if p.ExpiresAt != nil && !p.ExpiresAt.After(time.Now()) {
		return nil, "", fmt.Errorf("expires_at: %w: it is in the past", ErrInvalid)
	}
	caller, err := GetToken(ctx, q, p.By.TokenID)
	if errors.Is(err, ErrNotFound) {
		return nil, "", fmt.Errorf("%w: the calling token no longer exists", ErrForbidden)
	}
	if err != nil {
		return nil, "", err
	}
	params := p.CreateTokenParams
	if caller.ExpiresAt != nil {
		if params.ExpiresAt == nil {
			params.ExpiresAt = caller.ExpiresAt
		} else if params.ExpiresAt.After(*caller.ExpiresAt) {
			return nil, "", fmt.Errorf("%w: expires_at: after %s, when the calling token expires", ErrForbidden,
				caller.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	return CreateToken(ctx, q, &params)
}

// TxBeginner begins a transaction; *pgxpool.Pool is one.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SetMemberParams changes one member of a space on behalf of By.
type SetMemberParams struct {
	By        *Subject
	Space     string
	Principal string
	// Right to set; "" removes the principal from the space.
	Right Right
}

// spaceLockSQL serializes changes to one space's members, so two first
// grants cannot both find it empty.
const spaceLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('bothy.space_members:' || $1, 0))`

// callerRightSQL reads the caller's right on the space and locks its row,
// so a revoke of that right waits for the change it allowed; and whether
// the space has any member.
const callerRightSQL = `
SELECT (SELECT "right"::text FROM space_members WHERE space = $1 AND principal = $2 FOR SHARE),
       EXISTS (SELECT 1 FROM space_members WHERE space = $1)`

// SetMember grants p.Right on p.Space to p.Principal (replacing its right
// there, so it also lowers one), or removes it, if p.By may change the
// space's members (see the rules above). The check and the change are one
// transaction. It returns the membership as it is afterwards (nil after a
// removal); ErrNotFound if the principal to grant to does not exist.
func SetMember(ctx context.Context, db TxBeginner, p *SetMemberParams) (*Membership, error) {
	if p.Right != "" && !p.Right.Valid() {
		return nil, fmt.Errorf("right %q: %w: want read, write or admin", p.Right, ErrInvalid)
	}
	if !namePattern.MatchString(p.Space) {
		return nil, fmt.Errorf("space %q: %w name", p.Space, ErrInvalid)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("change members of %q: begin: %w", p.Space, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, spaceLockSQL, p.Space); err != nil {
		return nil, fmt.Errorf("change members of %q: lock: %w", p.Space, err)
	}
	if err := MayChangeMembers(ctx, tx, p.By, p.Space); err != nil {
		return nil, err
	}
	var out *Membership
	if p.Right == "" {
		err = Revoke(ctx, tx, p.Space, p.Principal)
	} else {
		err = Grant(ctx, tx, &GrantParams{Space: p.Space, Principal: p.Principal, Right: p.Right})
		out = &Membership{Space: p.Space, Principal: p.Principal, Right: p.Right}
	}
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := tx.QueryRow(ctx, `SELECT granted_at FROM space_members WHERE space = $1 AND principal = $2`,
			p.Space, p.Principal).Scan(&out.GrantedAt); err != nil {
			return nil, fmt.Errorf("change members of %q: %w", p.Space, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("change members of %q: commit: %w", p.Space, err)
	}
	return out, nil
}

// MayChangeMembers returns nil if s may change the members of space, else
// an error wrapping ErrForbidden that says why. Inside a transaction it
// locks s's membership row until the transaction ends.
func MayChangeMembers(ctx context.Context, q Querier, s *Subject, space string) error {
	if !ManagesPrincipals(s) {
		return fmt.Errorf("%w: changing a space's members needs a token with scope %s", ErrForbidden, ScopePrincipalsManage)
	}
	var right *string
	var exists bool
	if err := q.QueryRow(ctx, callerRightSQL, space, s.Principal).Scan(&right, &exists); err != nil {
		return fmt.Errorf("read right of %q on %q: %w", s.Principal, space, err)
	}
	switch {
	case right != nil && Right(*right) == RightAdmin:
		return nil
	case !exists:
		return nil // a new space: its first member
	case right == nil:
		return fmt.Errorf("%w: you have no right on space %q; changing its members needs admin", ErrForbidden, space)
	}
	return fmt.Errorf("%w: you have %s on space %q; changing its members needs admin", ErrForbidden, *right, space)
}

// memberRightSQL reads the caller's right on the space, and whether the
// space has any member.
const memberRightSQL = `
SELECT (SELECT "right"::text FROM space_members WHERE space = $1 AND principal = $2),
       EXISTS (SELECT 1 FROM space_members WHERE space = $1)`

// MayListMembers returns nil if s may list the members of space, else an
// error wrapping ErrForbidden that says why: a member of the space through
// a token that acts on it (see the rules above). A holder of
// principals:manage may also list a space without members, whose first
// member it may set: the list is empty.
func MayListMembers(ctx context.Context, q Querier, s *Subject, space string) error {
	if !ManagesPrincipals(s) && !carriesSpaceScope(s.Scopes, space) {
		return fmt.Errorf("%w: listing the members of space %q needs a token with a scope for that space", ErrForbidden, space)
	}
	var right *string
	var exists bool
	if err := q.QueryRow(ctx, memberRightSQL, space, s.Principal).Scan(&right, &exists); err != nil {
		return fmt.Errorf("read right of %q on %q: %w", s.Principal, space, err)
	}
	if right != nil || (!exists && ManagesPrincipals(s)) {
		return nil
	}
	return fmt.Errorf("%w: you have no right on space %q; listing its members needs one", ErrForbidden, space)
}

// carriesSpaceScope reports whether scopes hold a scope that acts on space:
// a known scope that is not global, bare or restricted to space.
func carriesSpaceScope(scopes []string, space string) bool {
	return slices.ContainsFunc(knownScopes, func(scope string) bool {
		return !slices.Contains(globalScopes, scope) && Covers(scopes, scope, space)
	})
}
