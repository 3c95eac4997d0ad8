package authz

import (
	"time"

	"github.com/google/uuid"
)

// The JSON forms of principals, memberships and tokens, as the HTTP API
// answers them (and a CLI that talks to it reads them).

// PrincipalView is a principal as the API shows it.
type PrincipalView struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"`
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	// Spaces are its rights; only the detail of one principal has them.
	Spaces *[]MembershipView `json:"spaces,omitempty"`
}

// View returns p as the API shows it, without its spaces.
func (p *Principal) View() PrincipalView {
	return PrincipalView{ID: p.ID, Kind: string(p.Kind), CreatedAt: p.CreatedAt, DisabledAt: p.DisabledAt}
}

// MembershipView is a principal's right on a space as the API shows it.
type MembershipView struct {
	Space     string    `json:"space"`
	Principal string    `json:"principal"`
	Right     string    `json:"right"`
	GrantedAt time.Time `json:"granted_at"`
}

// View returns m as the API shows it.
func (m *Membership) View() MembershipView {
	return MembershipView{Space: m.Space, Principal: m.Principal, Right: string(m.Right), GrantedAt: m.GrantedAt}
}

// Token states, as TokenView.Status shows them.
const (
	TokenActive  = "active"
	TokenRevoked = "revoked"
	TokenExpired = "expired"
)

// TokenView is a token as the API shows it: never its secret's hash, and
// its secret only in the answer that creates it.
type TokenView struct {
	ID         uuid.UUID  `json:"id"`
	Principal  string     `json:"principal"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	Status     string     `json:"status"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	// Secret is the bearer secret, set only when the token is created.
	Secret string `json:"secret,omitempty"`
}

// View returns t as the API shows it at now, without its secret.
func (t *Token) View(now time.Time) TokenView {
	status := TokenActive
	switch {
	case t.RevokedAt != nil:
		status = TokenRevoked
	case t.ExpiresAt != nil && !t.ExpiresAt.After(now):
		status = TokenExpired
	}
	scopes := t.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return TokenView{ID: t.ID, Principal: t.Principal, Name: t.Name, Scopes: scopes, Status: status, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt}
}

// The bodies of the admin API's requests and its pages, as the API reads
// and answers them and the CLI sends and reads them.

// CreatePrincipalRequest is the body of POST /v1/principals.
type CreatePrincipalRequest struct {
	ID string `json:"id"`
	// Kind is user or app. Default user.
	Kind string `json:"kind,omitempty"`
}

// CreateTokenRequest is the body of POST /v1/principals/{id}/tokens.
type CreateTokenRequest struct {
	// Scopes are required; [] makes a token that may do nothing.
	Scopes *[]string `json:"scopes"`
	Name   string    `json:"name,omitempty"`
	// ExpiresAt, if set, ends the token's life.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// SetMemberRequest is the body of PUT /v1/spaces/{space}/members/{principal}.
type SetMemberRequest struct {
	Right string `json:"right"`
}

// PrincipalsPage is a page of GET /v1/principals.
type PrincipalsPage struct {
	Principals []PrincipalView `json:"principals"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// TokensPage is a page of GET /v1/principals/{id}/tokens.
type TokensPage struct {
	Tokens     []TokenView `json:"tokens"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// MembersPage is a page of GET /v1/spaces/{space}/members.
type MembersPage struct {
	Members    []MembershipView `json:"members"`
	NextCursor string           `json:"next_cursor,omitempty"`
}
