package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// kindConflict is the problem kind of a request that the resource's
// current state refuses (409): a secret rotation while the previous secret
// still signs, a push endpoint registered by another principal.
const kindConflict = "conflict"

// webhookError maps the webhooks package's errors to problems. A limit is
// a 422 like any other refused field; its detail names the field and the
// configuration key.
func webhookError(err error) error {
	switch {
	case errors.Is(err, webhooks.ErrNotFound):
		return errorf(http.StatusNotFound, kindNotFound, "no such webhook subscription")
	case errors.Is(err, webhooks.ErrDeliveryNotFound):
		return errorf(http.StatusNotFound, kindNotFound, "%v", err)
	case errors.Is(err, webhooks.ErrConflict):
		return errorf(http.StatusConflict, kindConflict, "%v", err)
	case errors.Is(err, webhooks.ErrForbidden):
		return errorf(http.StatusForbidden, kindForbidden, "%v", err)
	case errors.Is(err, webhooks.ErrInvalid), errors.Is(err, webhooks.ErrTargetRefused), errors.Is(err, webhooks.ErrLimit):
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "%v", err)
	case errors.Is(err, webhooks.ErrRotationInProgress):
		return errorf(http.StatusConflict, kindConflict, "%v", err)
	}
	return err
}

// allow checks action on space for the subject with its token's scopes and
// turns a denial into 403.
func (a *API) allow(r *http.Request, s *authz.Subject, action authz.Action, space string) error {
	d, err := a.auth.Allowed(r.Context(), &authz.Request{Action: action, Principal: s.Principal, Scopes: scopesOf(s), Space: space})
	if err != nil {
		return err
	}
	if !d.Allowed {
		return errorf(http.StatusForbidden, kindForbidden, "%s: %s", action, d.Reason)
	}
	return nil
}

// scopesOf returns the token's scopes, never nil: nil would mean "the
// principal's full rights" to authz.Allowed.
func scopesOf(s *authz.Subject) []string {
	if s.Scopes == nil {
		return []string{}
	}
	return s.Scopes
}

func pathID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, errorf(http.StatusNotFound, kindNotFound, "%q is not an ID", r.PathValue("id"))
	}
	return id, nil
}

// subscription loads the subscription named in the path if the subject may
// manage it: its owner, or an admin of its space, with webhooks:manage on
// the space. Others get 404, so IDs cannot be probed.
func (a *API) subscription(r *http.Request, s *authz.Subject) (*webhooks.Subscription, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	sub, err := webhooks.Get(r.Context(), a.pool, id)
	if err != nil {
		return nil, webhookError(err)
	}
	if sub.Owner != s.Principal {
		right, err := authz.RightOn(r.Context(), a.pool, sub.Space, s.Principal)
		if err != nil {
			return nil, err
		}
		if !right.Includes(authz.RightAdmin) {
			return nil, errorf(http.StatusNotFound, kindNotFound, "no such webhook subscription")
		}
	}
	if err := a.allow(r, s, authz.ActionWebhookManage, sub.Space); err != nil {
		return nil, err
	}
	return sub, nil
}

// Cursor list names (page.Key.List) of this package's lists.
const (
	cursorWebhooks      = "webhooks"
	cursorDeliveries    = "deliveries"
	cursorRegistrations = "push-registrations"
)

// pageParams reads limit and cursor of a list: 400 naming the parameter.
func pageParams(r *http.Request, list string) (int, page.Key, error) {
	q := r.URL.Query()
	limit, err := page.Limit(q.Get("limit"))
	if err != nil {
		return 0, page.Key{}, errorf(http.StatusBadRequest, kindBadRequest, "%v", err)
	}
	after, err := page.Decode(list, q.Get("cursor"))
	if err != nil {
		return 0, page.Key{}, errorf(http.StatusBadRequest, kindBadRequest, "cursor: %v", err)
	}
	return limit, after, nil
}

// listWebhooks answers a page of the subscriptions the subject may manage,
// in creation order. Subscriptions on spaces where the subject lacks
// webhooks.manage are skipped, and further rows are read until the page is
// full, so a page is short only at the end.
func (a *API) listWebhooks(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	space := r.URL.Query().Get("space")
	limit, after, err := pageParams(r, cursorWebhooks)
	if err != nil {
		return err
	}
	p := &webhooks.ListParams{Owner: s.Principal, Space: space, AfterCreatedAt: after.Time, AfterID: after.ID}
	if space != "" {
		if err := a.allow(r, s, authz.ActionWebhookManage, space); err != nil {
			return err
		}
		right, err := authz.RightOn(r.Context(), a.pool, space, s.Principal)
		if err != nil {
			return err
		}
		if right.Includes(authz.RightAdmin) {
			p.Owner = "" // an admin sees every subscription on the space
		}
	}
	out := webhooks.SubscriptionsPage{Subscriptions: []webhooks.SubscriptionView{}}
	allowed := map[string]bool{}
	for {
		p.Limit = limit - len(out.Subscriptions) + 1 // one more says whether more follow
		subs, err := webhooks.List(r.Context(), a.pool, p)
		if err != nil {
			return err
		}
		more := len(subs) == p.Limit
		if more {
			subs = subs[:len(subs)-1]
		}
		for _, sub := range subs {
			ok, seen := allowed[sub.Space]
			if !seen {
				d, err := authz.Allowed(r.Context(), a.pool, &authz.Request{Action: authz.ActionWebhookManage,
					Principal: s.Principal, Scopes: scopesOf(s), Space: sub.Space})
				if err != nil {
					return err
				}
				ok, allowed[sub.Space] = d.Allowed, d.Allowed
			}
			if ok {
				out.Subscriptions = append(out.Subscriptions, webhooks.NewSubscriptionView(sub))
			}
			p.AfterCreatedAt, p.AfterID = sub.CreatedAt, sub.ID
		}
		if !more {
			break
		}
		if len(out.Subscriptions) == limit {
			out.NextCursor = page.Key{List: cursorWebhooks, Time: p.AfterCreatedAt, ID: p.AfterID}.Encode()
			break
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) createWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	var req webhooks.CreateRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.Space == "" || (req.URL == "" && req.Destination == nil) {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "space and url (or destination) are required")
	}
	// webhooks.Create checks webhooks.manage itself, with the token's
	// current scopes, and stores the token so deliveries keep to them.
	tokenID := s.TokenID
	sub, secret, err := webhooks.Create(r.Context(), a.pool, a.rounds, &webhooks.CreateParams{
		Owner: s.Principal, Space: req.Space, URL: req.URL, Destination: req.Destination, EventTypes: req.EventTypes, TokenID: &tokenID,
		Secret: req.Secret, Headers: req.Headers, AllowPrivateTargets: a.cfg.AllowPrivateWebhookTargets, Limits: &a.cfg.WebhookLimits,
		Policy: req.Params(), Filter: req.Filter, Transform: req.Transform,
	})
	if err != nil {
		return webhookError(err)
	}
	out := webhooks.NewSubscriptionView(sub)
	out.Secret = secret
	w.Header().Set("Location", "/v1/webhooks/"+sub.ID.String())
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (a *API) getWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, webhooks.NewSubscriptionView(sub))
	return nil
}

func (a *API) updateWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.UpdateRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.Empty() {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "nothing to change: send url, destination, event_types, headers, filter, transform and/or policy fields")
	}
	sub, err = webhooks.Update(r.Context(), a.pool, sub.ID, &webhooks.UpdateParams{
		URL: req.URL, Destination: req.Destination, EventTypes: req.EventTypes, Headers: req.Headers, AllowPrivateTargets: a.cfg.AllowPrivateWebhookTargets, Limits: &a.cfg.WebhookLimits,
		Policy: req.Params(), Filter: req.Filter, Transform: req.Transform,
	})
	if err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, webhooks.NewSubscriptionView(sub))
	return nil
}

func (a *API) disableWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.DisableRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, true); err != nil {
		return err
	}
	if len(req.Reason) > 500 {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "reason: %d bytes, at most 500", len(req.Reason))
	}
	if err := webhooks.Disable(r.Context(), a.pool, sub.ID, req.Reason); err != nil {
		return webhookError(err)
	}
	if sub, err = webhooks.Get(r.Context(), a.pool, sub.ID); err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, webhooks.NewSubscriptionView(sub))
	return nil
}

func (a *API) enableWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.EnableRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, true); err != nil {
		return err
	}
	res, err := a.enable(r, sub, &req)
	if err != nil {
		return webhookError(err)
	}
	if sub, err = webhooks.Get(r.Context(), a.pool, sub.ID); err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, webhooks.NewEnableView(sub, req.From, res))
	return nil
}

// maxOverlap bounds how long a replaced secret keeps signing.
const maxOverlap = 30 * 24 * time.Hour

func (a *API) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.RotateRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, true); err != nil {
		return err
	}
	overlap := 24 * time.Hour
	if req.OverlapSeconds != nil {
		if *req.OverlapSeconds < 0 || *req.OverlapSeconds > int64(maxOverlap/time.Second) {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "overlap_seconds: want 0..%d", int64(maxOverlap/time.Second))
		}
		overlap = time.Duration(*req.OverlapSeconds) * time.Second
	}
	secret, err := webhooks.RotateSecret(r.Context(), a.pool, sub.ID, overlap)
	if err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusOK, webhooks.NewRotateView(secret, overlap, time.Now()))
	return nil
}

var deliveryStatuses = map[string]bool{"": true, webhooks.DeliveryPending: true, webhooks.DeliveryDelivered: true,
	webhooks.DeliveryDead: true, webhooks.DeliverySkipped: true}

// deliveryFilters reads the deliveries list's event_id, type (an event
// type pattern), since and until (RFC 3339) into p: 400 naming the
// parameter for a bad value.
func deliveryFilters(r *http.Request, p *webhooks.DeliveriesParams) error {
	q := r.URL.Query()
	if v := q.Get("event_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return errorf(http.StatusBadRequest, kindBadRequest, "event_id %q: want an event's ID (a UUID)", v)
		}
		p.EventID = id
	}
	if v := q.Get("type"); v != "" {
		if !sync.ValidTypePattern(v) {
			return errorf(http.StatusBadRequest, kindBadRequest, "type %q: want an event type pattern such as item.created, item.* or *", v)
		}
		p.Type = v
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"since", &p.Since}, {"until", &p.Until}} {
		if v := q.Get(f.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return errorf(http.StatusBadRequest, kindBadRequest, "%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", f.name, v)
			}
			*f.to = t
		}
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Since.Before(p.Until) {
		return errorf(http.StatusBadRequest, kindBadRequest, "since: %s is not before until %s",
			p.Since.Format(time.RFC3339), p.Until.Format(time.RFC3339))
	}
	return nil
}

func (a *API) listDeliveries(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	status := q.Get("status")
	if !deliveryStatuses[status] {
		return errorf(http.StatusBadRequest, kindBadRequest, "status %q: want pending, delivered, dead or skipped", status)
	}
	limit, before, err := pageParams(r, cursorDeliveries)
	if err != nil {
		return err
	}
	if before.Seq < 0 || (before.Seq != 0 && before.ID != sub.ID) {
		return errorf(http.StatusBadRequest, kindBadRequest, "cursor: %v", page.ErrBadCursor)
	}
	p := &webhooks.DeliveriesParams{SubscriptionID: sub.ID, Status: status, Limit: limit + 1, BeforeSeq: before.Seq}
	if err := deliveryFilters(r, p); err != nil {
		return err
	}
	ds, err := webhooks.Deliveries(r.Context(), a.pool, p)
	if err != nil {
		return err
	}
	var next string
	if len(ds) > limit {
		ds = ds[:limit]
		next = page.Key{List: cursorDeliveries, ID: sub.ID, Seq: ds[limit-1].Seq}.Encode()
	}
	out := make([]webhooks.DeliveryView, 0, len(ds))
	for i := range ds {
		atts, err := webhooks.Attempts(r.Context(), a.pool, sub.ID, ds[i].Seq)
		if err != nil {
			return err
		}
		out = append(out, webhooks.NewDeliveryView(&ds[i], atts, true))
	}
	writeJSON(w, http.StatusOK, webhooks.DeliveriesPage{Deliveries: out, NextCursor: next})
	return nil
}
