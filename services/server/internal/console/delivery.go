package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
)

type deliveryData struct {
	Sub      *subscriptionView
	Delivery *deliveryDetail
	// Body is the event's data, indented; "" without the event.
	Body string
	// Headers are the request's headers in name order, secrets masked by
	// the API.
	Headers []header
}

type header struct{ Name, Value string }

// delivery shows one delivery: its event (the message's data), the
// request every attempt sent (secrets masked by the API) and each attempt
// with the receiver's answer. The subscription is read first, so a portal
// session sees only deliveries of its own subscriptions.
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
	for name, v := range d.Request.Headers {
		out.Headers = append(out.Headers, header{Name: name, Value: v})
	}
	slices.SortFunc(out.Headers, func(a, b header) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	c.render(w, r, s, http.StatusOK, "delivery", out)
	return nil
}
