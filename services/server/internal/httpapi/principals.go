package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/page"
)

// The admin API: principals, their tokens and the members of spaces. The
// rules of who may do what are authz's (admin.go); here they become
// answers. A principal or token the caller may not administer is 404, as
// if it did not exist, so ids cannot be probed.

// Cursor list names of the admin lists.
const (
	cursorPrincipals = "principals"
	cursorTokens     = "tokens"
	cursorMembers    = "members"
)

// adminError maps authz's errors to problems; field names the request's
// field an ErrInvalid is about ("" when the error names it).
func adminError(err error, field string) error {
	prefix := ""
	if field != "" {
		prefix = field + ": "
	}
	switch {
	case errors.Is(err, authz.ErrForbidden):
		return errorf(http.StatusForbidden, kindForbidden, "%v", err)
	case errors.Is(err, authz.ErrInvalid):
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "%s%v", prefix, err)
	case errors.Is(err, authz.ErrNotFound):
		return errorf(http.StatusNotFound, kindNotFound, "%v", err)
	}
	return err
}

// pageOf cuts items, read with limit+1 to learn whether more follow, to
// limit, and returns the cursor after its last item when more follow.
func pageOf[T any](items []T, limit int, key func(*T) page.Key) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, key(&items[limit-1]).Encode()
}

func noSuchPrincipal(id string) error {
	return errorf(http.StatusNotFound, kindNotFound, "no such principal %q", id)
}

func mayManagePrincipals(s *authz.Subject, what string) error {
	if authz.ManagesPrincipals(s) {
		return nil
	}
	return errorf(http.StatusForbidden, kindForbidden, "%s needs a token with scope %s", what, authz.ScopePrincipalsManage)
}

// createPrincipal creates a principal: 201, or 200 with the principal as
// it is when it existed already with the same kind (a retry after a lost
// answer), 409 when it exists with another kind.
func (a *API) createPrincipal(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayManagePrincipals(s, "creating principals"); err != nil {
		return err
	}
	var req authz.CreatePrincipalRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.ID == "" {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "id: required")
	}
	kind := authz.PrincipalKind(req.Kind)
	switch kind {
	case "":
		kind = authz.KindUser
	case authz.KindUser, authz.KindApp:
	default:
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "kind: %q: want user or app", req.Kind)
	}
	p, created, err := authz.EnsurePrincipal(r.Context(), a.pool, req.ID, kind)
	if err != nil {
		return adminError(err, "id")
	}
	switch {
	case created:
		w.Header().Set("Location", "/v1/principals/"+url.PathEscape(p.ID))
		writeJSON(w, http.StatusCreated, p.View())
	case p.Kind != kind:
		return errorf(http.StatusConflict, kindConflict, "principal %q exists with kind %s", p.ID, p.Kind)
	default:
		writeJSON(w, http.StatusOK, p.View())
	}
	return nil
}

// listPrincipals answers a page of every principal, in id order.
func (a *API) listPrincipals(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayManagePrincipals(s, "listing principals"); err != nil {
		return err
	}
	limit, after, err := pageParams(r, cursorPrincipals)
	if err != nil {
		return err
	}
	ps, err := authz.ListPrincipals(r.Context(), a.pool, &authz.ListPrincipalsParams{AfterID: after.Name, Limit: limit + 1})
	if err != nil {
		return err
	}
	out := authz.PrincipalsPage{Principals: []authz.PrincipalView{}}
	ps, out.NextCursor = pageOf(ps, limit, func(p *authz.Principal) page.Key { return page.Key{List: cursorPrincipals, Name: p.ID} })
	for i := range ps {
		out.Principals = append(out.Principals, ps[i].View())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getPrincipal answers one principal with its rights: the caller's own,
// or any with principals:manage.
func (a *API) getPrincipal(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	id := r.PathValue("id")
	if !authz.MayAdminister(s, id) {
		return noSuchPrincipal(id)
	}
	p, err := authz.GetPrincipal(r.Context(), a.pool, id)
	if errors.Is(err, authz.ErrNotFound) {
		return noSuchPrincipal(id)
	}
	if err != nil {
		return err
	}
	ms, err := authz.Memberships(r.Context(), a.pool, id)
	if err != nil {
		return err
	}
	spaces := make([]authz.MembershipView, len(ms))
	for i := range ms {
		spaces[i] = ms[i].View()
	}
	out := p.View()
	out.Spaces = &spaces
	writeJSON(w, http.StatusOK, out)
	return nil
}

// createToken mints a token for the principal in the path and answers it
// with its secret, this once (authz.MintToken has the rules).
func (a *API) createToken(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	id := r.PathValue("id")
	if !authz.MayAdminister(s, id) {
		return noSuchPrincipal(id)
	}
	var req authz.CreateTokenRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.Scopes == nil {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "scopes: required (send [] for a token that may do nothing)")
	}
	tok, secret, err := authz.MintToken(r.Context(), a.pool, &authz.MintTokenParams{By: s, CreateTokenParams: authz.CreateTokenParams{
		Principal: id, Scopes: *req.Scopes, Name: req.Name, ExpiresAt: req.ExpiresAt}})
	if errors.Is(err, authz.ErrNotFound) {
		return noSuchPrincipal(id)
	}
	if err != nil {
		return adminError(err, "scopes")
	}
	out := tok.View(time.Now())
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// listTokens answers a page of the principal's tokens, oldest first,
// without secrets: the caller's own, or any with principals:manage.
func (a *API) listTokens(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	id := r.PathValue("id")
	if !authz.MayAdminister(s, id) {
		return noSuchPrincipal(id)
	}
	limit, after, err := pageParams(r, cursorTokens)
	if err != nil {
		return err
	}
	if _, err := authz.GetPrincipal(r.Context(), a.pool, id); errors.Is(err, authz.ErrNotFound) {
		return noSuchPrincipal(id)
	} else if err != nil {
		return err
	}
	toks, err := authz.ListTokens(r.Context(), a.pool, &authz.ListTokensParams{Principal: id, AfterID: after.ID, Limit: limit + 1})
	if err != nil {
		return err
	}
	out := authz.TokensPage{Tokens: []authz.TokenView{}}
	toks, out.NextCursor = pageOf(toks, limit, func(t *authz.Token) page.Key { return page.Key{List: cursorTokens, ID: t.ID} })
	now := time.Now()
	for i := range toks {
		out.Tokens = append(out.Tokens, toks[i].View(now))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeToken revokes a token for good: one of the caller's own (the one
// it calls with too), or any with principals:manage. Revoking a revoked
// token is no error.
func (a *API) revokeToken(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return errorf(http.StatusNotFound, kindNotFound, "%q is not a token id", r.PathValue("id"))
	}
	tok, err := authz.GetToken(r.Context(), a.pool, id)
	if errors.Is(err, authz.ErrNotFound) || (err == nil && !authz.MayAdminister(s, tok.Principal)) {
		return errorf(http.StatusNotFound, kindNotFound, "no such token %s", id)
	}
	if err != nil {
		return err
	}
	if err := authz.RevokeToken(r.Context(), a.pool, id); err != nil {
		return adminError(err, "")
	}
	a.auth.Clear()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listMembers answers a page of the space's members in principal order,
// to its members (authz.MayListMembers has the rule).
func (a *API) listMembers(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if err := authz.MayListMembers(r.Context(), a.pool, s, space); err != nil {
		return adminError(err, "")
	}
	limit, after, err := pageParams(r, cursorMembers)
	if err != nil {
		return err
	}
	ms, err := authz.Members(r.Context(), a.pool, &authz.MembersParams{Space: space, AfterPrincipal: after.Name, Limit: limit + 1})
	if err != nil {
		return err
	}
	out := authz.MembersPage{Members: []authz.MembershipView{}}
	ms, out.NextCursor = pageOf(ms, limit, func(m *authz.Membership) page.Key { return page.Key{List: cursorMembers, Name: m.Principal} })
	for i := range ms {
		out.Members = append(out.Members, ms[i].View())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// putMember sets the principal's right on the space (authz.SetMember has
// the rules).
func (a *API) putMember(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	var req authz.SetMemberRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if !authz.Right(req.Right).Valid() {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "right: %q: want read, write or admin", req.Right)
	}
	m, err := a.setMember(r, s, space, authz.Right(req.Right))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m.View())
	return nil
}

// deleteMember removes the principal from the space; one that was not a
// member is no error.
func (a *API) deleteMember(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space, err := pathSpace(r)
	if err != nil {
		return err
	}
	if _, err := a.setMember(r, s, space, ""); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) setMember(r *http.Request, s *authz.Subject, space string, right authz.Right) (*authz.Membership, error) {
	principal := r.PathValue("principal")
	m, err := authz.SetMember(r.Context(), a.pool, &authz.SetMemberParams{By: s, Space: space, Principal: principal, Right: right})
	if err == nil {
		a.auth.Clear()
	}
	if errors.Is(err, authz.ErrNotFound) {
		return nil, noSuchPrincipal(principal)
	}
	if err != nil {
		return nil, adminError(err, "")
	}
	return m, nil
}
