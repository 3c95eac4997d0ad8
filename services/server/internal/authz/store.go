package authz

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// PrincipalKind tells users from apps.
type PrincipalKind string

const (
	KindUser PrincipalKind = "user"
	KindApp  PrincipalKind = "app"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// CreatePrincipal creates principal id of kind. It is idempotent: an
// existing principal is left as it is.
func CreatePrincipal(ctx context.Context, q Querier, id string, kind PrincipalKind) error {
	if err := checkPrincipal(id, kind); err != nil {
		return err
	}
	_, err := q.Exec(ctx, `INSERT INTO principals (id, kind) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, string(kind))
	if err != nil {
		return fmt.Errorf("create principal %q: %w", id, err)
	}
	return nil
}

func checkPrincipal(id string, kind PrincipalKind) error {
	if !namePattern.MatchString(id) {
		return fmt.Errorf("principal %q: %w name: want 1-128 characters of letters, digits and ._:@-", id, ErrInvalid)
	}
	if kind != KindUser && kind != KindApp {
		return fmt.Errorf("principal kind %q: %w: want user or app", kind, ErrInvalid)
	}
	return nil
}

// SetPrincipalDisabled disables or re-enables a principal. A disabled
// principal is allowed nothing and cannot authenticate.
func SetPrincipalDisabled(ctx context.Context, q Querier, id string, disabled bool) error {
	ct, err := q.Exec(ctx, `UPDATE principals SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END WHERE id = $1`, id, disabled)
	if err != nil {
		return fmt.Errorf("disable principal %q: %w", id, err)
	}
	if ct.RowsAffected() == 0 {
		return fmt.Errorf("principal %q: %w", id, ErrNotFound)
	}
	return nil
}

// GrantParams names a principal's right on a space.
type GrantParams struct {
	Space     string
	Principal string
	Right     Right
}

// Grant sets the principal's right on the space, replacing a previous one
// (so it can also lower a right). The principal must exist.
func Grant(ctx context.Context, q Querier, p *GrantParams) error {
	if !p.Right.Valid() {
		return fmt.Errorf("right %q: %w: want read, write or admin", p.Right, ErrInvalid)
	}
	if !namePattern.MatchString(p.Space) {
		return fmt.Errorf("space %q: %w name", p.Space, ErrInvalid)
	}
	ct, err := q.Exec(ctx, `
INSERT INTO space_members (space, principal, "right")
SELECT $1, id, $3::space_right FROM principals WHERE id = $2
ON CONFLICT (space, principal) DO UPDATE SET "right" = EXCLUDED."right", granted_at = now()`,
		p.Space, p.Principal, string(p.Right))
	if err != nil {
		return fmt.Errorf("grant %s on %q to %q: %w", p.Right, p.Space, p.Principal, err)
	}
	if ct.RowsAffected() == 0 {
		return fmt.Errorf("grant to principal %q: %w", p.Principal, ErrNotFound)
	}
	return nil
}

// Revoke removes every right of the principal on the space. Revoking what
// was not granted is not an error.
func Revoke(ctx context.Context, q Querier, space, principal string) error {
	if _, err := q.Exec(ctx, `DELETE FROM space_members WHERE space = $1 AND principal = $2`, space, principal); err != nil {
		return fmt.Errorf("revoke on %q from %q: %w", space, principal, err)
	}
	return nil
}

// RightOn returns the principal's right on the space, or "" for none.
func RightOn(ctx context.Context, q Querier, space, principal string) (Right, error) {
	var r string
	err := q.QueryRow(ctx, `SELECT "right"::text FROM space_members WHERE space = $1 AND principal = $2`, space, principal).Scan(&r)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read right on %q of %q: %w", space, principal, err)
	}
	return Right(r), nil
}

// Token is a stored token, without its secret.
type Token struct {
	ID        uuid.UUID
	Principal string
	Scopes    []string
	Name      string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
	// LastUsedAt is when it last authenticated, to the minute; nil if
	// never.
	LastUsedAt *time.Time
}

// CreateTokenParams describes a new token.
type CreateTokenParams struct {
	// Principal owning the token; it must exist.
	Principal string
	// Scopes the token carries (ValidateScopes); empty allows nothing.
	Scopes []string
	// Name is a label for humans. Default "".
	Name string
	// ExpiresAt, if set, ends the token's life.
	ExpiresAt *time.Time
}

// tokenPrefix starts every bearer secret, so leaked tokens are easy to spot
// by secret scanners.
const tokenPrefix = "bothy_"

// CreateToken stores a new token and returns it with its bearer secret.
// The secret is shown once: only its SHA-256 is stored.
func CreateToken(ctx context.Context, q Querier, p *CreateTokenParams) (*Token, string, error) {
	if err := ValidateScopes(p.Scopes); err != nil {
		return nil, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, "", fmt.Errorf("token id: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, "", fmt.Errorf("token secret: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	t := &Token{ID: id, Principal: p.Principal, Scopes: scopes, Name: p.Name, ExpiresAt: p.ExpiresAt}
	err = q.QueryRow(ctx, `
INSERT INTO tokens (id, principal, secret_hash, scopes, name, expires_at)
SELECT $1, id, $3, $4, $5, $6 FROM principals WHERE id = $2
RETURNING created_at`, id, p.Principal, sum[:], scopes, p.Name, p.ExpiresAt).Scan(&t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("token for principal %q: %w", p.Principal, ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("create token for %q: %w", p.Principal, err)
	}
	return t, tokenPrefix + hex.EncodeToString(id[:]) + "_" + secret, nil
}

// SetTokenScopes replaces a token's scopes; it takes effect at the next
// decision.
func SetTokenScopes(ctx context.Context, q Querier, id uuid.UUID, scopes []string) error {
	if err := ValidateScopes(scopes); err != nil {
		return err
	}
	if scopes == nil {
		scopes = []string{}
	}
	ct, err := q.Exec(ctx, `UPDATE tokens SET scopes = $2 WHERE id = $1`, id, scopes)
	if err != nil {
		return fmt.Errorf("set scopes of token %s: %w", id, err)
	}
	if ct.RowsAffected() == 0 {
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return nil
}

// RevokeToken revokes a token for good.
func RevokeToken(ctx context.Context, q Querier, id uuid.UUID) error {
	ct, err := q.Exec(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if ct.RowsAffected() == 0 {
		return fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return nil
}

// GetToken reads a token without its secret.
func GetToken(ctx context.Context, q Querier, id uuid.UUID) (*Token, error) {
	t := &Token{ID: id}
	err := q.QueryRow(ctx, `SELECT principal, scopes, name, created_at, expires_at, revoked_at, last_used_at FROM tokens WHERE id = $1`, id).
		Scan(&t.Principal, &t.Scopes, &t.Name, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &t.LastUsedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read token %s: %w", id, err)
	}
	return t, nil
}

// Subject is an authenticated caller: its principal and the token's scopes.
type Subject struct {
	Principal string
	TokenID   uuid.UUID
	Scopes    []string
	// Portal is set for a console session opened by a portal link: a
	// product's user acting within what the link grants, not the owner's
	// own request, so what only the owner may ask for is refused.
	Portal bool
}

// Authenticate resolves a bearer secret (with or without the "Bearer "
// prefix) to its subject. Any failure is ErrUnauthenticated; database
// trouble is returned wrapped as itself.
func Authenticate(ctx context.Context, q Querier, bearer string) (*Subject, error) {
	s, _, err := authenticate(ctx, q, bearer)
	return s, err
}

// authenticate is Authenticate that also returns when the token expires
// (nil: never).
func authenticate(ctx context.Context, q Querier, bearer string) (*Subject, *time.Time, error) {
	bearer = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(bearer), "Bearer "))
	rest, ok := strings.CutPrefix(bearer, tokenPrefix)
	if !ok {
		return nil, nil, ErrUnauthenticated
	}
	idHex, secret, ok := strings.Cut(rest, "_")
	if !ok || len(idHex) != 32 || secret == "" {
		return nil, nil, ErrUnauthenticated
	}
	var id uuid.UUID
	if _, err := hex.Decode(id[:], []byte(idHex)); err != nil {
		return nil, nil, ErrUnauthenticated
	}
	var hash []byte
	s := &Subject{TokenID: id}
	var usable bool
	var expires *time.Time
	err := q.QueryRow(ctx, `
SELECT t.principal, t.scopes, t.secret_hash, t.expires_at,
       t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now()) AND p.disabled_at IS NULL
FROM tokens t JOIN principals p ON p.id = t.principal WHERE t.id = $1`, id).Scan(&s.Principal, &s.Scopes, &hash, &expires, &usable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, nil, fmt.Errorf("authenticate: %w", err)
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], hash) != 1 || !usable {
		return nil, nil, ErrUnauthenticated
	}
	// Best effort: a failure to record use must not fail the request.
	_, _ = q.Exec(ctx, `UPDATE tokens SET last_used_at = now() WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, id)
	return s, expires, nil
}

// EnsurePrincipal creates principal id of kind unless it exists, and
// returns it as it is now with whether this call created it. An existing
// principal is left as it is, whatever its kind.
func EnsurePrincipal(ctx context.Context, q Querier, id string, kind PrincipalKind) (*Principal, bool, error) {
	if err := checkPrincipal(id, kind); err != nil {
		return nil, false, err
	}
	rows, err := q.Query(ctx, `INSERT INTO principals (id, kind) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING
RETURNING `+principalColumns, id, string(kind))
	if err != nil {
		return nil, false, fmt.Errorf("create principal %q: %w", id, err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPrincipal)
	if err == nil {
		return &p, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create principal %q: %w", id, err)
	}
	existing, err := GetPrincipal(ctx, q, id)
	return existing, false, err
}
