package httpapi

import (
	"errors"
	"net/http"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// jobs returns what inserts delivery jobs.
func (a *API) jobs() (webhooks.JobInserter, error) {
	if a.jobsIns == nil || a.source == nil {
		return nil, errors.New("http api: built without a job inserter or an event source")
	}
	return a.jobsIns, nil
}

func (a *API) resendDelivery(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, seq, err := a.subscriptionSeq(r, s)
	if err != nil {
		return err
	}
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &struct{}{}, true); err != nil {
		return err
	}
	jobs, err := a.jobs()
	if err != nil {
		return err
	}
	d, err := webhooks.Resend(r.Context(), a.pool, &webhooks.ResendParams{SubscriptionID: sub.ID, Seq: seq, Events: a.source, Jobs: jobs})
	if err != nil {
		return webhookError(err)
	}
	atts, err := webhooks.Attempts(r.Context(), a.pool, sub.ID, seq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, webhooks.NewDeliveryView(d, atts, true))
	return nil
}

func (a *API) recoverWebhook(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	sub, err := a.subscription(r, s)
	if err != nil {
		return err
	}
	var req webhooks.RecoverRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	before := req.BeforeCreation != nil && *req.BeforeCreation
	if before && s.Portal {
		return errorf(http.StatusForbidden, kindForbidden, "before_creation: a portal link's session may not recover events "+
			"from before the subscription's creation; only its owner's own request may")
	}
	jobs, err := a.jobs()
	if err != nil {
		return err
	}
	p := &webhooks.RecoverParams{SubscriptionID: sub.ID, Events: a.source, Jobs: jobs, BeforeCreation: before}
	for _, f := range []struct {
		name string
		v    *int64
		to   *int64
	}{{"from_seq", req.FromSeq, &p.FromSeq}, {"to_seq", req.ToSeq, &p.ToSeq}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "%s: want a seq of at least 1", f.name)
		}
		*f.to = *f.v
	}
	if req.Since != nil {
		p.Since = *req.Since
	}
	if req.Until != nil {
		p.Until = *req.Until
	}
	res, err := webhooks.Recover(r.Context(), a.pool, p)
	if err != nil {
		return webhookError(err)
	}
	writeJSON(w, http.StatusAccepted, res.View())
	return nil
}

// enable enables sub from where req says.
func (a *API) enable(r *http.Request, sub *webhooks.Subscription, req *webhooks.EnableRequest) (*webhooks.EnableResult, error) {
	switch req.From {
	case "", "head":
		req.From = "head"
		return webhooks.Enable(r.Context(), a.pool, a.rounds, sub.ID)
	case "backlog":
		jobs, err := a.jobs()
		if err != nil {
			return nil, err
		}
		return webhooks.EnableFromBacklog(r.Context(), a.pool, a.rounds, &webhooks.EnableBacklogParams{ID: sub.ID, Events: a.source, Jobs: jobs})
	}
	return nil, errorf(http.StatusUnprocessableEntity, kindInvalid, "from %q: want head or backlog", req.From)
}
