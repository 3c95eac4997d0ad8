package httpapi

import (
	"fmt"
	"net/http"

	"github.com/google/uuid"

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

// testWebhookResponse is the answer to POST /v1/webhooks/{id}/test.
type testWebhookResponse struct {
	MessageID uuid.UUID `json:"message_id"`
	// StatusCode is null when no answer came.
	StatusCode      *int    `json:"status_code"`
	LatencySeconds  float64 `json:"latency_seconds"`
	OK              bool    `json:"ok"`
	Error           string  `json:"error,omitempty"`
	ResponseExcerpt string  `json:"response_excerpt,omitempty"`
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
	out := testWebhookResponse{MessageID: res.MessageID, LatencySeconds: res.Latency.Seconds(), OK: res.Error == "",
		Error: res.Error, ResponseExcerpt: res.ResponseExcerpt}
	if res.StatusCode != 0 {
		out.StatusCode = &res.StatusCode
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
