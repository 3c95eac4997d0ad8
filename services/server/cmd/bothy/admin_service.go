package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/page"
)

// adminService is where the principals, tokens and members commands act:
// on the database as the operator, who may do anything (dbAdmin), or
// through the admin API as the token's principal, within its rules
// (apiAdmin). Both answer with the API's views.
type adminService interface {
	CreatePrincipal(ctx context.Context, req *authz.CreatePrincipalRequest) (p authz.PrincipalView, created bool, err error)
	Principals(ctx context.Context, q *pageQuery) (authz.PrincipalsPage, error)
	// Principal returns one principal with its spaces.
	Principal(ctx context.Context, id string) (authz.PrincipalView, error)
	CreateToken(ctx context.Context, principal string, req *authz.CreateTokenRequest) (authz.TokenView, error)
	Tokens(ctx context.Context, principal string, q *pageQuery) (authz.TokensPage, error)
	RevokeToken(ctx context.Context, id uuid.UUID) error
	Members(ctx context.Context, space string, q *pageQuery) (authz.MembersPage, error)
	// SetMember gives principal right on space and returns the
	// membership; right "" removes it and returns nil.
	SetMember(ctx context.Context, space, principal string, right authz.Right) (*authz.MembershipView, error)
}

// pageQuery is a page of a list: Limit 0 is the API's default.
type pageQuery struct {
	Limit  int
	Cursor string
}

// Cursor list names of the admin API's lists, which the CLI's share.
const (
	cursorPrincipals = "principals"
	cursorTokens     = "tokens"
	cursorMembers    = "members"
)

// admin returns where the admin commands act, and how to let go of it.
func (c *call) admin(ctx context.Context) (adminService, func(), error) {
	api, err := c.remote.client()
	if err != nil {
		return nil, nil, err
	}
	if api != nil {
		return &apiAdmin{api: api}, func() {}, nil
	}
	_, pool, err := c.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &dbAdmin{pool: pool}, pool.Close, nil
}

// dbAdmin acts on the database with the authz package, as the operator.
type dbAdmin struct {
	pool *pgxpool.Pool
}

// start decodes q's cursor of list and returns the limit to read: one
// more than the page, to learn whether more follow.
func (q *pageQuery) start(list string) (page.Key, int, error) {
	after, err := page.Decode(list, q.Cursor)
	if err != nil {
		return page.Key{}, 0, fmt.Errorf("%w: --cursor: %v", errUsage, err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = page.DefaultLimit
	}
	return after, limit + 1, nil
}

// cut cuts items, read with limit+1, to the page and returns the cursor
// after its last item when more follow.
func cut[T any](items []T, read int, key func(*T) page.Key) ([]T, string) {
	if len(items) < read {
		return items, ""
	}
	items = items[:read-1]
	return items, key(&items[len(items)-1]).Encode()
}

func (d *dbAdmin) CreatePrincipal(ctx context.Context, req *authz.CreatePrincipalRequest) (authz.PrincipalView, bool, error) {
	p, created, err := authz.EnsurePrincipal(ctx, d.pool, req.ID, authz.PrincipalKind(cmp.Or(req.Kind, string(authz.KindUser))))
	if err != nil {
		return authz.PrincipalView{}, false, err
	}
	return p.View(), created, nil
}

func (d *dbAdmin) Principals(ctx context.Context, q *pageQuery) (authz.PrincipalsPage, error) {
	out := authz.PrincipalsPage{Principals: []authz.PrincipalView{}}
	after, read, err := q.start(cursorPrincipals)
	if err != nil {
		return out, err
	}
	ps, err := authz.ListPrincipals(ctx, d.pool, &authz.ListPrincipalsParams{AfterID: after.Name, Limit: read})
	if err != nil {
		return out, err
	}
	ps, out.NextCursor = cut(ps, read, func(p *authz.Principal) page.Key { return page.Key{List: cursorPrincipals, Name: p.ID} })
	for i := range ps {
		out.Principals = append(out.Principals, ps[i].View())
	}
	return out, nil
}

func (d *dbAdmin) Principal(ctx context.Context, id string) (authz.PrincipalView, error) {
	p, err := authz.GetPrincipal(ctx, d.pool, id)
	if err != nil {
		return authz.PrincipalView{}, err
	}
	ms, err := authz.Memberships(ctx, d.pool, id)
	if err != nil {
		return authz.PrincipalView{}, err
	}
	spaces := make([]authz.MembershipView, len(ms))
	for i := range ms {
		spaces[i] = ms[i].View()
	}
	v := p.View()
	v.Spaces = &spaces
	return v, nil
}

func (d *dbAdmin) CreateToken(ctx context.Context, principal string, req *authz.CreateTokenRequest) (authz.TokenView, error) {
	t, secret, err := authz.CreateToken(ctx, d.pool, &authz.CreateTokenParams{Principal: principal, Scopes: *req.Scopes, Name: req.Name,
		ExpiresAt: req.ExpiresAt})
	if err != nil {
		return authz.TokenView{}, err
	}
	v := t.View(time.Now())
	v.Secret = secret
	return v, nil
}

func (d *dbAdmin) Tokens(ctx context.Context, principal string, q *pageQuery) (authz.TokensPage, error) {
	out := authz.TokensPage{Tokens: []authz.TokenView{}}
	after, read, err := q.start(cursorTokens)
	if err != nil {
		return out, err
	}
	if _, err := authz.GetPrincipal(ctx, d.pool, principal); err != nil {
		return out, err
	}
	ts, err := authz.ListTokens(ctx, d.pool, &authz.ListTokensParams{Principal: principal, AfterID: after.ID, Limit: read})
	if err != nil {
		return out, err
	}
	ts, out.NextCursor = cut(ts, read, func(t *authz.Token) page.Key { return page.Key{List: cursorTokens, ID: t.ID} })
	now := time.Now()
	for i := range ts {
		out.Tokens = append(out.Tokens, ts[i].View(now))
	}
	return out, nil
}

func (d *dbAdmin) RevokeToken(ctx context.Context, id uuid.UUID) error {
	return authz.RevokeToken(ctx, d.pool, id)
}

func (d *dbAdmin) Members(ctx context.Context, space string, q *pageQuery) (authz.MembersPage, error) {
	out := authz.MembersPage{Members: []authz.MembershipView{}}
	after, read, err := q.start(cursorMembers)
	if err != nil {
		return out, err
	}
	ms, err := authz.Members(ctx, d.pool, &authz.MembersParams{Space: space, AfterPrincipal: after.Name, Limit: read})
	if err != nil {
		return out, err
	}
	ms, out.NextCursor = cut(ms, read, func(m *authz.Membership) page.Key { return page.Key{List: cursorMembers, Name: m.Principal} })
	for i := range ms {
		out.Members = append(out.Members, ms[i].View())
	}
	return out, nil
}

func (d *dbAdmin) SetMember(ctx context.Context, space, principal string, right authz.Right) (*authz.MembershipView, error) {
	if right == "" {
		return nil, authz.Revoke(ctx, d.pool, space, principal)
	}
	if err := authz.Grant(ctx, d.pool, &authz.GrantParams{Space: space, Principal: principal, Right: right}); err != nil {
		return nil, err
	}
	ms, err := authz.Memberships(ctx, d.pool, principal)
	if err != nil {
		return nil, err
	}
	for i := range ms {
		if ms[i].Space == space {
			v := ms[i].View()
			return &v, nil
		}
	}
	return nil, fmt.Errorf("%s has no right on %s after the grant", principal, space)
}

// apiAdmin runs the admin commands through the HTTP API.
type apiAdmin struct {
	api *apiClient
}

func pageValues(q *pageQuery) url.Values {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	setIf(v, "cursor", q.Cursor)
	return v
}

func principalPath(id, rest string) string { return "/v1/principals/" + url.PathEscape(id) + rest }

func (a *apiAdmin) CreatePrincipal(ctx context.Context, req *authz.CreatePrincipalRequest) (authz.PrincipalView, bool, error) {
	var out authz.PrincipalView
	status, err := a.api.doStatus(ctx, http.MethodPost, "/v1/principals", nil, req, &out)
	return out, status == http.StatusCreated, err
}

func (a *apiAdmin) Principals(ctx context.Context, q *pageQuery) (authz.PrincipalsPage, error) {
	var out authz.PrincipalsPage
	err := a.api.do(ctx, http.MethodGet, "/v1/principals", pageValues(q), nil, &out)
	return out, err
}

func (a *apiAdmin) Principal(ctx context.Context, id string) (authz.PrincipalView, error) {
	var out authz.PrincipalView
	err := a.api.do(ctx, http.MethodGet, principalPath(id, ""), nil, nil, &out)
	return out, err
}

func (a *apiAdmin) CreateToken(ctx context.Context, principal string, req *authz.CreateTokenRequest) (authz.TokenView, error) {
	var out authz.TokenView
	err := a.api.do(ctx, http.MethodPost, principalPath(principal, "/tokens"), nil, req, &out)
	return out, err
}

func (a *apiAdmin) Tokens(ctx context.Context, principal string, q *pageQuery) (authz.TokensPage, error) {
	var out authz.TokensPage
	err := a.api.do(ctx, http.MethodGet, principalPath(principal, "/tokens"), pageValues(q), nil, &out)
	return out, err
}

func (a *apiAdmin) RevokeToken(ctx context.Context, id uuid.UUID) error {
	return a.api.do(ctx, http.MethodDelete, "/v1/tokens/"+id.String(), nil, nil, nil)
}

func memberPath(space, principal string) string {
	return "/v1/spaces/" + url.PathEscape(space) + "/members/" + url.PathEscape(principal)
}

func (a *apiAdmin) Members(ctx context.Context, space string, q *pageQuery) (authz.MembersPage, error) {
	var out authz.MembersPage
	err := a.api.do(ctx, http.MethodGet, "/v1/spaces/"+url.PathEscape(space)+"/members", pageValues(q), nil, &out)
	return out, err
}

func (a *apiAdmin) SetMember(ctx context.Context, space, principal string, right authz.Right) (*authz.MembershipView, error) {
	if right == "" {
		return nil, a.api.do(ctx, http.MethodDelete, memberPath(space, principal), nil, nil, nil)
	}
	var out authz.MembershipView
	if err := a.api.do(ctx, http.MethodPut, memberPath(space, principal), nil, &authz.SetMemberRequest{Right: string(right)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
