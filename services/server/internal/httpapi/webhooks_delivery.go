package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// deliveryDetail is one delivery with what was sent: its attempts, its
// event and the request's headers.
type deliveryDetail struct {
	webhooks.DeliveryView
	// Event is null when retention removed it, or when the caller may
	// not read the space's events (events:read).
	Event   *sync.Envelope `json:"event"`
	Request requestView    `json:"request"`
}

// methodPublish is a broker destination's "method" in a delivery's
// request view: its messages are published, not posted.
const methodPublish = "PUBLISH"

// requestView is the request of a delivery, as far as it may be shown:
// its headers as the newest attempt sent them (webhooks.ShownHeaders).
type requestView struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// subscriptionSeq loads the subscription of the path, as subscription
// does, and reads the path's seq: 404 for one that is not a seq.
func (a *API) subscriptionSeq(r *http.Request, s *authz.Subject) (*webhooks.Subscription, int64, error) {
	sub, err := a.subscription(r, s)
	if err != nil {
		return nil, 0, err
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		return nil, 0, errorf(http.StatusNotFound, kindNotFound, "%q is not a seq", r.PathValue("seq"))
	}
	return sub, seq, nil
}

// getDelivery answers one delivery of a subscription by its event's seq,
// to whoever may manage the subscription.
func (a *API) getDelivery(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, seq, err := a.subscriptionSeq(r, s)
	if err != nil {
		return err
	}
	ds, err := webhooks.Deliveries(r.Context(), a.pool, &webhooks.DeliveriesParams{SubscriptionID: sub.ID, Limit: 1, Seq: seq})
	if err != nil {
		return err
	}
	if len(ds) == 0 {
		return errorf(http.StatusNotFound, kindNotFound, "subscription %s has no delivery of seq %d", sub.ID, seq)
	}
	atts, err := webhooks.Attempts(r.Context(), a.pool, sub.ID, seq)
	if err != nil {
		return err
	}
	out := deliveryDetail{DeliveryView: webhooks.NewDeliveryView(&ds[0], atts, true)}
	out.Request = requestView{Method: http.MethodPost, URL: sub.URL, Headers: webhooks.ShownHeaders(sub, &out.DeliveryView)}
	if !sub.Destination.IsHTTP() {
		out.Request.Method, out.Request.URL = methodPublish, sub.Destination.Summary()
	}
	d, err := authz.Allowed(r.Context(), a.pool, &authz.Request{Action: authz.ActionEventsRead, Principal: s.Principal,
		Scopes: scopesOf(s), Space: sub.Space})
	if err != nil {
		return err
	}
	if d.Allowed {
		e, err := a.reader.EventByID(r.Context(), ds[0].EventID)
		switch {
		case err == nil:
			env := e.Envelope()
			out.Event = &env
		case !errors.Is(err, sync.ErrEventNotFound):
			return err
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
