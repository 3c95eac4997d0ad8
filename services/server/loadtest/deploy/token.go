package deploy

import (
	"context"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// WriterToken makes principal an app with write on every space and
// returns a bearer token of its with the scope events:write: what the
// producers append with.
func WriterToken(ctx context.Context, q authz.Querier, principal string, spaces []string) (string, error) {
	if err := authz.CreatePrincipal(ctx, q, principal, authz.KindApp); err != nil {
		return "", err
	}
	for _, s := range spaces {
		if err := authz.Grant(ctx, q, &authz.GrantParams{Space: s, Principal: principal, Right: authz.RightWrite}); err != nil {
			return "", err
		}
	}
	_, token, err := authz.CreateToken(ctx, q, &authz.CreateTokenParams{Principal: principal, Name: "perf producers",
		Scopes: []string{authz.ScopeEventsWrite}})
	return token, err
}
