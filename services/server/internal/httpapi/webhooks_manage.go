package httpapi

import (
	"fmt"
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

// testWebhook sends a signed test message to the subscription's receiver
// and answers what the receiver did; the request is made outside any
// transaction (webhooks.Tester).
func (a *API) testWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &struct{}{}, true); err != nil {
		return err
	}
	if a.testerErr != nil {
		return fmt.Errorf("webhook tester: %w", a.testerErr)
	}
	res, err := a.tester.Send(r.Context(), a.pool, sub.ID)
	if err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, res.View())
	return nil
}
