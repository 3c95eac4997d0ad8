package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"golang.org/x/sync/errgroup"
)

// visible reports whether a portal session may see sub: the session's
// principal's own subscription on the portal's space. Other sessions see
// whatever the API answered.
func (s *session) visible(sub *subscriptionView) bool {
	return s.portalSpace == "" || (sub.Space == s.portalSpace && sub.Owner == s.subject.Principal)
}

type subscriptionsData struct {
	Space string
	Rows  []subscriptionRow
	Pages pager
}

// subscriptionRow is a subscription in the list, with its health.
type subscriptionRow struct {
	Sub    subscriptionView
	Health *health
}

// listSubscriptions is one page of the subscriptions the API lists for
// the session, on space if not "" (a portal session: its own space only).
func (c *Console) listSubscriptions(r *http.Request, s *session, space, cursor string, limit int) (*subscriptionsPage, error) {
	if s.portalSpace != "" {
		// Without a space the API lists only the principal's own
		// subscriptions, and the session's scope (webhooks:manage on the
		// portal's space) keeps them to that space. With the space, an
		// admin's pages would be filled with other owners' subscriptions,
		// dropped here, and their cursors would name them.
		space = ""
	}
	q := url.Values{}
	if space != "" {
		q.Set("space", space)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var pg subscriptionsPage
	if err := c.call(r, s, http.MethodGet, "/v1/webhooks?"+q.Encode(), nil, &pg); err != nil {
		return nil, err
	}
	kept := pg.Subscriptions[:0]
	for i := range pg.Subscriptions {
		if s.visible(&pg.Subscriptions[i]) {
			kept = append(kept, pg.Subscriptions[i])
		}
	}
	pg.Subscriptions = kept
	return &pg, nil
}

func (c *Console) subscriptions(w http.ResponseWriter, r *http.Request, s *session) error {
	space := r.URL.Query().Get("space")
	pages := readPager(r)
	pg, err := c.listSubscriptions(r, s, space, pages.Cursor, pages.Limit)
	if err != nil {
		return err
	}
	d := &subscriptionsData{Space: space, Rows: make([]subscriptionRow, len(pg.Subscriptions))}
	// The rows' health is two API calls each, made a few at a time.
	g, ctx := errgroup.WithContext(r.Context())
	g.SetLimit(healthConcurrency)
	for i := range pg.Subscriptions {
		d.Rows[i].Sub = pg.Subscriptions[i]
		g.Go(func() error {
			h, err := c.healthOf(r.WithContext(ctx), s, &d.Rows[i].Sub)
			d.Rows[i].Health = h
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	pages.Next = pg.NextCursor
	if space != "" && s.portalSpace == "" {
		pages.base = url.Values{"space": {space}}
	}
	d.Pages = pages
	c.render(w, r, s, http.StatusOK, "subscriptions", d)
	return nil
}

// getSubscription reads the subscription of the path as the API answers
// it to the session; one a portal session may not see is not found.
func (c *Console) getSubscription(r *http.Request, s *session) (*subscriptionView, error) {
	id := r.PathValue("id")
	var sub subscriptionView
	err := c.call(r, s, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id), nil, &sub)
	var pe *pageError
	if s.portalSpace != "" && errors.As(err, &pe) && pe.status == http.StatusForbidden {
		// A portal viewer does not learn that a subscription exists
		// outside the portal.
		return nil, errorf(http.StatusNotFound, "no such webhook subscription")
	}
	if err != nil {
		return nil, err
	}
	if !s.visible(&sub) {
		return nil, errorf(http.StatusNotFound, "no such webhook subscription")
	}
	return &sub, nil
}

type subscriptionData struct {
	Sub    *subscriptionView
	Filter deliveryFilter
	// FilterError is the API's refusal of the filter, shown by it.
	FilterError string
	Deliveries  []deliveryView
	Pages       pager
	// Saved says the edit form has just changed the subscription.
	Saved bool
	// Stats and Charts are the last 24 hours of attempts; nil when the
	// API has none to give.
	Stats  *statsView
	Charts []chart
}

func (c *Console) subscription(w http.ResponseWriter, r *http.Request, s *session) error {
	sub, err := c.getSubscription(r, s)
	if err != nil {
		return err
	}
	f := readDeliveryFilter(r)
	pages := readPager(r)
	q := f.apiQuery()
	q.Set("limit", strconv.Itoa(pages.Limit))
	if pages.Cursor != "" {
		q.Set("cursor", pages.Cursor)
	}
	var pg deliveriesPage
	d := &subscriptionData{Sub: sub, Filter: f, Saved: r.URL.Query().Get("saved") != ""}
	err = c.call(r, s, http.MethodGet, "/v1/webhooks/"+url.PathEscape(sub.ID)+"/deliveries?"+q.Encode(), nil, &pg)
	if pe := (*pageError)(nil); errors.As(err, &pe) && pe.status == http.StatusBadRequest {
		d.FilterError = pe.detail // the API names the filter it refused
	} else if err != nil {
		return err
	}
	pages.Next = pg.NextCursor
	pages.base = f.query()
	d.Deliveries, d.Pages = pg.Deliveries, pages
	if d.Stats, err = c.stats(r, s, sub.ID); err != nil {
		return err
	}
	d.Charts = charts(d.Stats)
	c.render(w, r, s, http.StatusOK, "subscription", d)
	return nil
}

type pushData struct {
	Registrations []registrationView
	NextCursor    string
	Space         string
	Preference    *preferenceView
	// Problem is why the API refused the list, shown instead of it.
	Problem string
}

func (c *Console) push(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.portalSpace != "" {
		return errorf(http.StatusNotFound, "a portal session shows webhook subscriptions only")
	}
	d := &pushData{Space: r.URL.Query().Get("space")}
	q := url.Values{}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var pg registrationsPage
	err := c.call(r, s, http.MethodGet, "/v1/push/registrations?"+q.Encode(), nil, &pg)
	if pe := (*pageError)(nil); errors.As(err, &pe) && pe.status == http.StatusForbidden {
		d.Problem = pe.detail
	} else if err != nil {
		return err
	}
	d.Registrations, d.NextCursor = pg.Registrations, pg.NextCursor
	if d.Space != "" {
		var pref preferenceView
		if err := c.call(r, s, http.MethodGet, "/v1/spaces/"+url.PathEscape(d.Space)+"/push-preference", nil, &pref); err != nil {
			return err
		}
		d.Preference = &pref
	}
	c.render(w, r, s, http.StatusOK, "push", d)
	return nil
}

// setPreference turns push notifications of a space on or off for the
// session's principal.
func (c *Console) setPreference(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.portalSpace != "" {
		return errorf(http.StatusNotFound, "a portal session shows webhook subscriptions only")
	}
	space := r.PostFormValue("space")
	if space == "" {
		return errorf(http.StatusBadRequest, "space: name the space")
	}
	notify := r.PostFormValue("notify") == "true"
	if err := c.call(r, s, http.MethodPut, "/v1/spaces/"+url.PathEscape(space)+"/push-preference", map[string]bool{"notify": notify}, nil); err != nil {
		return err
	}
	http.Redirect(w, r, Prefix+"push?"+url.Values{"space": {space}}.Encode(), http.StatusSeeOther)
	return nil
}

// seqOf reads a delivery's seq from the form.
func seqOf(r *http.Request) (int64, error) {
	seq, err := strconv.ParseInt(r.PostFormValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		return 0, errorf(http.StatusBadRequest, "seq: want a delivery's seq")
	}
	return seq, nil
}
