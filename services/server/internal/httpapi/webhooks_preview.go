package httpapi

import (
	"cmp"
	"net/http"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// previewWebhook evaluates a filter and a transform (the saved ones unless
// given) on the space's recent events or on a given event, with the rights
// of reading the subscription. Nothing is saved or sent.
func (a *API) previewWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.PreviewRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, true); err != nil {
		return err
	}
	if req.Limit < 0 || req.Limit > webhooks.MaxPreviewEvents {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "limit: want 1..%d", webhooks.MaxPreviewEvents)
	}
	var events []sync.Event
	if req.Event != nil {
		if req.Event.Type == "" {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "event.type is required")
		}
		events = []sync.Event{req.Event.Event(sub.Space)}
	} else if events, err = webhooks.RecentEvents(r.Context(), a.reader, sub.Space, cmp.Or(req.Limit, 20)); err != nil {
		return err
	}
	v, err := webhooks.Preview(sub, &req, events)
	if err != nil {
		return webhookError(err)
	}
	bw := newBufferedWriter()
	writeJSON(bw, http.StatusOK, v)
	a.answerDurably(w, r, bw)
	return nil
}
