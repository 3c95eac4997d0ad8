package httpapi

import (
	"net/http"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// deleteWebhook removes a subscription with its delivery records; a
// delivery in flight is its last request (webhooks.Delete).
func (a *API) deleteWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	if _, err := webhooks.Delete(r.Context(), a.pool, a.rounds, sub.ID); err != nil {
		return webhookError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
