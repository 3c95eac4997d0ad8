package httpapi

import (
	"net/http"
	"slices"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// mayReadOps: consumer cursors span every space, so they need the global
// ops:read scope rather than a right on some space.
func mayReadOps(s *authz.Subject) error {
	if slices.Contains(s.Scopes, authz.ScopeOpsRead) {
		return nil
	}
	return errorf(http.StatusForbidden, kindForbidden, "consumer status needs a token with scope %s", authz.ScopeOpsRead)
}

// listConsumers answers every consumer's cursor, the log's head and the
// lag between them.
func (a *API) listConsumers(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if err := mayReadOps(s); err != nil {
		return err
	}
	sts, err := a.status.ConsumerStatuses(r.Context())
	if err != nil {
		return err
	}
	out := sync.ConsumerStatusList{Consumers: make([]sync.ConsumerStatusJSON, len(sts))}
	for i, st := range sts {
		out.Consumers[i] = st.JSON()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
