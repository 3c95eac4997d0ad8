package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

type deliveryData struct {
	Sub      *subscriptionView
	Delivery *deliveryDetail
	// Body is the event's data, indented; "" without the event.
	Body string
	// Attempts are the delivery's attempts, oldest first, each with the
	// headers of its request.
	Attempts []attemptRequest
}

// attemptRequest is one attempt with the headers its request carried in
// name order, secrets masked by the API: the delivery's request headers
// with the attempt's own webhook-id (a batch's, for a batched delivery).
// Headers is nil when the attempt sent no request.
type attemptRequest struct {
	attemptView
	Headers []header
}

type header struct{ Name, Value string }

// delivery shows one delivery: its event (the message's data) and each
// attempt with the request it sent (secrets masked by the API) and the
// receiver's answer. The subscription is read first, so a portal session
// sees only deliveries of its own subscriptions.
func (c *Console) delivery(w http.ResponseWriter, r *http.Request, s *session) error {
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		return errorf(http.StatusNotFound, "%q is not a delivery's seq", r.PathValue("seq"))
	}
	var d deliveryDetail
	if err := c.call(r, s, http.MethodGet, "/v1/webhooks/"+url.PathEscape(sub.ID)+"/deliveries/"+strconv.FormatInt(seq, 10), nil, &d); err != nil {
		return err
	}
	out := &deliveryData{Sub: sub, Delivery: &d}
	if d.Event != nil {
		var buf bytes.Buffer
		if json.Indent(&buf, d.Event.Data, "", "  ") == nil {
			out.Body = buf.String()
		} else {
			out.Body = string(d.Event.Data)
		}
	}
	for _, a := range d.AttemptList {
		out.Attempts = append(out.Attempts, attemptRequest{attemptView: a, Headers: requestHeaders(d.Request.Headers, a.WebhookID)})
	}
	c.render(w, r, s, http.StatusOK, "delivery", out)
	return nil
}

// requestHeaders are the headers of a request signed under webhook-id
// msgID, in name order: shown with webhook-id msgID; nil when msgID is ""
// (no request was sent).
func requestHeaders(shown map[string]string, msgID string) []header {
	if msgID == "" {
		return nil
	}
	out := []header{{Name: http.CanonicalHeaderKey("webhook-id"), Value: msgID}}
	for name, v := range shown {
		if http.CanonicalHeaderKey(name) != out[0].Name {
			out = append(out, header{Name: name, Value: v})
		}
	}
	slices.SortFunc(out, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	return out
}
