package console

import (
	"errors"
	"net/http"
	"sort"

	"github.com/bothy/bothy/services/server/internal/sync"
)

type consumersPage struct {
	Consumers []sync.ConsumerStatusJSON `json:"consumers"`
}

type lagData struct {
	// Consumers is the event log's consumers, when the API showed them.
	Consumers []sync.ConsumerStatusJSON
	// ConsumersRefused is why the API did not show them (it names the
	// scope they need); empty when it did, or in a portal session.
	ConsumersRefused string
	Subscriptions    []subscriptionView
	// More is set when there were more subscriptions than one page.
	More bool
}

// lag shows the event log's consumers against the head, if the session's
// token may read them, and the subscriptions of the first page with
// deliveries still pending, most pending first.
func (c *Console) lag(w http.ResponseWriter, r *http.Request, s *session) error {
	d := &lagData{}
	if s.portalSpace == "" {
		// A portal session's scopes are cut to webhooks:manage on one
		// space, so it is not offered the consumers at all.
		var cp consumersPage
		err := c.call(r, s, http.MethodGet, "/v1/consumers", nil, &cp)
		if pe := (*pageError)(nil); errors.As(err, &pe) && pe.status == http.StatusForbidden {
			d.ConsumersRefused = pe.detail
		} else if err != nil {
			return err
		}
		d.Consumers = cp.Consumers
	}
	pg, err := c.listSubscriptions(r, s, "", "", 0)
	if err != nil {
		return err
	}
	subs := pg.Subscriptions
	sort.SliceStable(subs, func(i, j int) bool { return subs[i].Pending > subs[j].Pending })
	d.Subscriptions, d.More = subs, pg.NextCursor != ""
	c.render(w, r, s, http.StatusOK, "lag", d)
	return nil
}
