package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// apiWebhooks runs the webhooks commands through the HTTP API, as the
// token's principal: the server decides what is allowed (rights, scopes,
// private targets, limits) and the CLI prints its answer.
type apiWebhooks struct {
	api *apiClient
}

func subscriptionPath(id uuid.UUID, rest string) string { return "/v1/webhooks/" + id.String() + rest }

func (a *apiWebhooks) List(ctx context.Context, q *listQuery) ([]webhooks.SubscriptionView, string, error) {
	if q.Owner != "" {
		return nil, "", fmt.Errorf("%w: --owner needs the database: through --server the list is the token's principal's "+
			"subscriptions, and every subscription of a --space it administers", errUsage)
	}
	limit, all := q.Limit, q.Limit == 0
	if all {
		limit = page.MaxLimit
	}
	out := []webhooks.SubscriptionView{}
	cursor := q.Cursor
	for {
		v := url.Values{"limit": {strconv.Itoa(limit)}}
		setIf(v, "space", q.Space)
		setIf(v, "cursor", cursor)
		var res webhooks.SubscriptionsPage
		if err := a.api.do(ctx, http.MethodGet, "/v1/webhooks", v, nil, &res); err != nil {
			return nil, "", err
		}
		out = append(out, res.Subscriptions...)
		if !all || res.NextCursor == "" {
			return out, res.NextCursor, nil
		}
		cursor = res.NextCursor
	}
}

func setIf(v url.Values, key, value string) {
	if value != "" {
		v.Set(key, value)
	}
}

func (a *apiWebhooks) Create(ctx context.Context, p *createParams) (webhooks.SubscriptionView, error) {
	var out webhooks.SubscriptionView
	switch {
	case p.Owner != "":
		return out, fmt.Errorf("%w: --owner needs the database: through --server the token's principal owns the subscription", errUsage)
	case p.TokenID != nil:
		return out, fmt.Errorf("%w: --token-id needs the database: through --server the calling token bounds the deliveries", errUsage)
	}
	err := a.api.do(ctx, http.MethodPost, "/v1/webhooks", nil, &p.CreateRequest, &out)
	return out, err
}

func (a *apiWebhooks) Update(ctx context.Context, id uuid.UUID, req *webhooks.UpdateRequest) (webhooks.SubscriptionView, error) {
	var out webhooks.SubscriptionView
	err := a.api.do(ctx, http.MethodPatch, subscriptionPath(id, ""), nil, req, &out)
	return out, err
}

func (a *apiWebhooks) Delete(ctx context.Context, id uuid.UUID) (*int64, error) {
	return nil, a.api.do(ctx, http.MethodDelete, subscriptionPath(id, ""), nil, nil, nil)
}

func (a *apiWebhooks) Disable(ctx context.Context, id uuid.UUID, req *webhooks.DisableRequest) (webhooks.SubscriptionView, error) {
	var out webhooks.SubscriptionView
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/disable"), nil, req, &out)
	return out, err
}

func (a *apiWebhooks) Enable(ctx context.Context, id uuid.UUID, req *webhooks.EnableRequest) (webhooks.EnableView, error) {
	var out webhooks.EnableView
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/enable"), nil, req, &out)
	return out, err
}

func (a *apiWebhooks) Rotate(ctx context.Context, id uuid.UUID, overlap time.Duration) (webhooks.RotateView, error) {
	var out webhooks.RotateView
	if overlap%time.Second != 0 {
		return out, fmt.Errorf("%w: --overlap %s: the API takes whole seconds", errUsage, overlap)
	}
	secs := int64(overlap / time.Second)
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/rotate-secret"), nil, &webhooks.RotateRequest{OverlapSeconds: &secs}, &out)
	return out, err
}

func (a *apiWebhooks) Test(ctx context.Context, id uuid.UUID) (webhooks.TestView, error) {
	var out webhooks.TestView
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/test"), nil, struct{}{}, &out)
	return out, err
}

func (a *apiWebhooks) Preview(ctx context.Context, id uuid.UUID, req *webhooks.PreviewRequest) (*webhooks.PreviewView, error) {
	var out webhooks.PreviewView
	if err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/preview"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (a *apiWebhooks) Deliveries(ctx context.Context, id uuid.UUID, q *deliveriesQuery) ([]webhooks.DeliveryView, string, error) {
	v := url.Values{"limit": {strconv.Itoa(q.Limit)}}
	setIf(v, "status", q.Status)
	setIf(v, "cursor", q.Cursor)
	setIf(v, "type", q.Type)
	setIf(v, "event_id", q.EventID)
	setIf(v, "since", q.Since)
	setIf(v, "until", q.Until)
	var res webhooks.DeliveriesPage
	err := a.api.do(ctx, http.MethodGet, subscriptionPath(id, "/deliveries"), v, nil, &res)
	return res.Deliveries, res.NextCursor, err
}

func (a *apiWebhooks) Resend(ctx context.Context, id uuid.UUID, seq int64) (webhooks.DeliveryView, error) {
	var out webhooks.DeliveryView
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/deliveries/"+strconv.FormatInt(seq, 10)+"/resend"), nil, struct{}{}, &out)
	return out, err
}

func (a *apiWebhooks) Recover(ctx context.Context, id uuid.UUID, req *webhooks.RecoverRequest) (webhooks.RecoverView, error) {
	var out webhooks.RecoverView
	err := a.api.do(ctx, http.MethodPost, subscriptionPath(id, "/recover"), nil, req, &out)
	return out, err
}

func (a *apiWebhooks) Stats(ctx context.Context, id uuid.UUID, q *statsQuery) (*webhooks.StatsView, error) {
	v := url.Values{}
	setIf(v, "since", q.Since)
	setIf(v, "until", q.Until)
	setIf(v, "step", q.Step)
	var out webhooks.StatsView
	if err := a.api.do(ctx, http.MethodGet, subscriptionPath(id, "/stats"), v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
