package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/page"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// webhookService is where the webhooks commands act: on the database as
// an operator, within the configuration's limits (dbWebhooks), or through
// the HTTP API as the token's principal (apiWebhooks). Both answer with
// the API's views, so a command prints the same either way.
type webhookService interface {
	List(ctx context.Context, q *listQuery) (subs []webhooks.SubscriptionView, next string, err error)
	Create(ctx context.Context, p *createParams) (webhooks.SubscriptionView, error)
	Update(ctx context.Context, id uuid.UUID, req *webhooks.UpdateRequest) (webhooks.SubscriptionView, error)
	// Delete returns how many delivery records went with the
	// subscription, nil where the API does not say.
	Delete(ctx context.Context, id uuid.UUID) (deliveries *int64, err error)
	Disable(ctx context.Context, id uuid.UUID, req *webhooks.DisableRequest) (webhooks.SubscriptionView, error)
	Enable(ctx context.Context, id uuid.UUID, req *webhooks.EnableRequest) (webhooks.EnableView, error)
	Rotate(ctx context.Context, id uuid.UUID, overlap time.Duration) (webhooks.RotateView, error)
	Test(ctx context.Context, id uuid.UUID) (webhooks.TestView, error)
	Preview(ctx context.Context, id uuid.UUID, req *webhooks.PreviewRequest) (*webhooks.PreviewView, error)
	Deliveries(ctx context.Context, id uuid.UUID, q *deliveriesQuery) (ds []webhooks.DeliveryView, next string, err error)
	Resend(ctx context.Context, id uuid.UUID, seq int64) (webhooks.DeliveryView, error)
	Recover(ctx context.Context, id uuid.UUID, req *webhooks.RecoverRequest) (webhooks.RecoverView, error)
	Stats(ctx context.Context, id uuid.UUID, q *statsQuery) (*webhooks.StatsView, error)
}

// listQuery selects subscriptions: Limit 0 is all of them.
type listQuery struct {
	Owner, Space, Cursor string
	Limit                int
}

// deliveriesQuery selects a subscription's deliveries, newest first.
type deliveriesQuery struct {
	Status, Cursor string
	Limit          int
	// Type, EventID, Since and Until filter as the API's query parameters
	// of the same names do; empty for none.
	Type, EventID, Since, Until string
}

// params checks the filters as the API does, naming the flag, and returns
// the store's parameters for a page of limit after before.
func (q *deliveriesQuery) params(id uuid.UUID, before int64, limit int) (*webhooks.DeliveriesParams, error) {
	p := &webhooks.DeliveriesParams{SubscriptionID: id, Status: q.Status, Limit: limit, BeforeSeq: before, Type: q.Type}
	if q.Type != "" && !sync.ValidTypePattern(q.Type) {
		return nil, fmt.Errorf("%w: --type %q: want an event type, a prefix ending in .* or *", errUsage, q.Type)
	}
	var err error
	if q.EventID != "" {
		if p.EventID, err = uuid.Parse(q.EventID); err != nil {
			return nil, fmt.Errorf("%w: --event-id: %v", errUsage, err)
		}
	}
	for _, f := range []struct {
		flag, value string
		into        *time.Time
	}{{"--since", q.Since, &p.Since}, {"--until", q.Until, &p.Until}} {
		if f.value == "" {
			continue
		}
		if *f.into, err = parseTime(f.flag, f.value, time.Now()); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// createParams are a create request and what only an operator may choose.
type createParams struct {
	webhooks.CreateRequest
	// Owner is the principal the deliveries act for; through the API it
	// is the token's.
	Owner string
	// TokenID bounds every delivery by that token's scopes; through the
	// API it is the calling token.
	TokenID *uuid.UUID
}

// webhooks returns where the webhooks commands act, and how to let go of
// it.
func (c *call) webhooks(ctx context.Context) (webhookService, func(), error) {
	api, err := c.remote.client()
	if err != nil {
		return nil, nil, err
	}
	if api != nil {
		return &apiWebhooks{api: api}, func() {}, nil
	}
	cfg, pool, err := c.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &dbWebhooks{cfg: cfg, pool: pool}, pool.Close, nil
}

// dbWebhooks acts on the database with the webhooks package, as the
// server would, under the configuration the CLI loaded.
type dbWebhooks struct {
	cfg  *config.Config
	pool *pgxpool.Pool
}

func (d *dbWebhooks) limits() *webhooks.Limits {
	return &webhooks.Limits{MaxEventTypes: d.cfg.Webhooks.MaxEventTypes, MaxSubscriptionsPerSpace: d.cfg.Webhooks.MaxSubscriptionsPerSpace,
		MaxSubscriptionsPerOwner: d.cfg.Webhooks.MaxSubscriptionsPerOwner, EventRetention: d.cfg.Sync.EventRetention}
}

func (d *dbWebhooks) List(ctx context.Context, q *listQuery) ([]webhooks.SubscriptionView, string, error) {
	after, err := page.Decode(cursorWebhooks, q.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("%w: --cursor: %v", errUsage, err)
	}
	p := &webhooks.ListParams{Owner: q.Owner, Space: q.Space, AfterCreatedAt: after.Time, AfterID: after.ID}
	if q.Limit > 0 {
		p.Limit = q.Limit + 1
	}
	subs, err := webhooks.List(ctx, d.pool, p)
	if err != nil {
		return nil, "", err
	}
	var next string
	if q.Limit > 0 && len(subs) > q.Limit {
		subs = subs[:q.Limit]
		last := subs[len(subs)-1]
		next = page.Key{List: cursorWebhooks, Time: last.CreatedAt, ID: last.ID}.Encode()
	}
	if err := postgres.Durable(ctx, d.pool); err != nil { // pending counts come from rounds
		return nil, "", err
	}
	out := make([]webhooks.SubscriptionView, 0, len(subs))
	for _, s := range subs {
		out = append(out, webhooks.NewSubscriptionView(s))
	}
	return out, next, nil
}

func (d *dbWebhooks) Create(ctx context.Context, p *createParams) (webhooks.SubscriptionView, error) {
	if p.Owner == "" {
		return webhooks.SubscriptionView{}, fmt.Errorf("%w: webhooks create needs --owner on the database (through --server the token's principal owns it)", errUsage)
	}
	s, secret, err := webhooks.Create(ctx, d.pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: p.Owner, Space: p.Space, URL: p.URL,
		Destination: p.Destination, EventTypes: p.EventTypes, TokenID: p.TokenID, Secret: p.Secret, Headers: p.Headers, Policy: p.Params(),
		Filter: p.Filter, Transform: p.Transform,
		AllowPrivateTargets: d.cfg.Webhooks.AllowPrivateTargets, Limits: d.limits()})
	if err != nil {
		return webhooks.SubscriptionView{}, err
	}
	v := webhooks.NewSubscriptionView(s)
	v.Secret = secret
	return v, nil
}

func (d *dbWebhooks) Update(ctx context.Context, id uuid.UUID, req *webhooks.UpdateRequest) (webhooks.SubscriptionView, error) {
	s, err := webhooks.Update(ctx, d.pool, id, &webhooks.UpdateParams{URL: req.URL, Destination: req.Destination, EventTypes: req.EventTypes, Headers: req.Headers,
		Filter: req.Filter, Transform: req.Transform,
		Policy: req.Params(), AllowPrivateTargets: d.cfg.Webhooks.AllowPrivateTargets, Limits: d.limits()})
	if err != nil {
		return webhooks.SubscriptionView{}, err
	}
	return webhooks.NewSubscriptionView(s), nil
}

func (d *dbWebhooks) Delete(ctx context.Context, id uuid.UUID) (*int64, error) {
	n, err := webhooks.Delete(ctx, d.pool, postgres.CursorStore{}, id)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func (d *dbWebhooks) Disable(ctx context.Context, id uuid.UUID, req *webhooks.DisableRequest) (webhooks.SubscriptionView, error) {
	if err := webhooks.Disable(ctx, d.pool, id, req.Reason); err != nil {
		return webhooks.SubscriptionView{}, err
	}
	return d.get(ctx, id)
}

func (d *dbWebhooks) get(ctx context.Context, id uuid.UUID) (webhooks.SubscriptionView, error) {
	s, err := webhooks.Get(ctx, d.pool, id)
	if err != nil {
		return webhooks.SubscriptionView{}, err
	}
	return webhooks.NewSubscriptionView(s), nil
}

func (d *dbWebhooks) Enable(ctx context.Context, id uuid.UUID, req *webhooks.EnableRequest) (webhooks.EnableView, error) {
	var res *webhooks.EnableResult
	var err error
	if req.From == "backlog" {
		err = d.withSendDeps(func(events *postgres.EventLog, jobs *river.Client[pgx.Tx]) error {
			res, err = webhooks.EnableFromBacklog(ctx, d.pool, postgres.CursorStore{}, &webhooks.EnableBacklogParams{ID: id, Events: events, Jobs: jobs})
			return err
		})
	} else {
		res, err = webhooks.Enable(ctx, d.pool, postgres.CursorStore{}, id)
	}
	if err != nil {
		return webhooks.EnableView{}, err
	}
	s, err := webhooks.Get(ctx, d.pool, id)
	if err != nil {
		return webhooks.EnableView{}, err
	}
	return webhooks.NewEnableView(s, req.From, res), nil
}

// withSendDeps runs f with what resend, recover and enable from the
// backlog need beside the pool: the log to read events from and a River
// client that only inserts the delivery job (the server's workers send).
func (d *dbWebhooks) withSendDeps(f func(events *postgres.EventLog, jobs *river.Client[pgx.Tx]) error) error {
	rc, err := river.NewClient(riverpgxv5.New(d.pool), &river.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	events := postgres.NewEventLog(d.pool, nil)
	defer events.Close()
	return f(events, rc)
}

func (d *dbWebhooks) Rotate(ctx context.Context, id uuid.UUID, overlap time.Duration) (webhooks.RotateView, error) {
	secret, err := webhooks.RotateSecret(ctx, d.pool, id, overlap)
	if err != nil {
		return webhooks.RotateView{}, err
	}
	return webhooks.NewRotateView(secret, overlap, time.Now()), nil
}

func (d *dbWebhooks) Preview(ctx context.Context, id uuid.UUID, req *webhooks.PreviewRequest) (*webhooks.PreviewView, error) {
	s, err := webhooks.Get(ctx, d.pool, id)
	if err != nil {
		return nil, err
	}
	var events []sync.Event
	if req.Event != nil {
		events = []sync.Event{req.Event.Event(s.Space)}
	} else {
		log := postgres.NewEventLog(d.pool, nil)
		defer log.Close()
		if events, err = webhooks.RecentEvents(ctx, log, s.Space, cmp.Or(req.Limit, 20)); err != nil {
			return nil, err
		}
	}
	return webhooks.Preview(s, req, events)
}

func (d *dbWebhooks) Test(ctx context.Context, id uuid.UUID) (webhooks.TestView, error) {
	tester, err := webhooks.NewTester(&webhooks.TesterConfig{AllowPrivateTargets: d.cfg.Webhooks.AllowPrivateTargets,
		Timeout: d.cfg.Webhooks.Timeout, MaxResponseBytes: d.cfg.Webhooks.MaxResponseBytes})
	if err != nil {
		return webhooks.TestView{}, err
	}
	defer tester.Close()
	res, err := tester.Send(ctx, d.pool, id)
	if err != nil {
		return webhooks.TestView{}, err
	}
	return res.View(), nil
}

func (d *dbWebhooks) Deliveries(ctx context.Context, id uuid.UUID, q *deliveriesQuery) ([]webhooks.DeliveryView, string, error) {
	before, err := page.Decode(cursorDeliveries, q.Cursor)
	if err == nil && before.Seq != 0 && before.ID != id {
		err = page.ErrBadCursor
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: --cursor: %v", errUsage, err)
	}
	p, err := q.params(id, before.Seq, q.Limit+1)
	if err != nil {
		return nil, "", err
	}
	ds, err := webhooks.Deliveries(ctx, d.pool, p)
	if err != nil {
		return nil, "", err
	}
	var next string
	if len(ds) > q.Limit {
		ds = ds[:q.Limit]
		next = page.Key{List: cursorDeliveries, ID: id, Seq: ds[len(ds)-1].Seq}.Encode()
	}
	if err := postgres.Durable(ctx, d.pool); err != nil { // deliveries are made by rounds
		return nil, "", err
	}
	out := make([]webhooks.DeliveryView, 0, len(ds))
	for i := range ds {
		as, err := webhooks.Attempts(ctx, d.pool, id, ds[i].Seq)
		if err != nil {
			return nil, "", err
		}
		out = append(out, webhooks.NewDeliveryView(&ds[i], as, true))
	}
	return out, next, nil
}

func (d *dbWebhooks) Resend(ctx context.Context, id uuid.UUID, seq int64) (webhooks.DeliveryView, error) {
	var v webhooks.DeliveryView
	err := d.withSendDeps(func(events *postgres.EventLog, jobs *river.Client[pgx.Tx]) error {
		dl, err := webhooks.Resend(ctx, d.pool, &webhooks.ResendParams{SubscriptionID: id, Seq: seq, Events: events, Jobs: jobs})
		if err != nil {
			return err
		}
		as, err := webhooks.Attempts(ctx, d.pool, id, seq)
		v = webhooks.NewDeliveryView(dl, as, true)
		return err
	})
	return v, err
}

func (d *dbWebhooks) Recover(ctx context.Context, id uuid.UUID, req *webhooks.RecoverRequest) (webhooks.RecoverView, error) {
	p := &webhooks.RecoverParams{SubscriptionID: id}
	if req.FromSeq != nil {
		p.FromSeq = *req.FromSeq
	}
	if req.ToSeq != nil {
		p.ToSeq = *req.ToSeq
	}
	if req.Since != nil {
		p.Since = *req.Since
	}
	if req.Until != nil {
		p.Until = *req.Until
	}
	if req.BeforeCreation != nil {
		p.BeforeCreation = *req.BeforeCreation
	}
	var v webhooks.RecoverView
	err := d.withSendDeps(func(events *postgres.EventLog, jobs *river.Client[pgx.Tx]) error {
		p.Events, p.Jobs = events, jobs
		res, err := webhooks.Recover(ctx, d.pool, p)
		if err == nil {
			v = res.View()
		}
		return err
	})
	return v, err
}

// Cursor list names of the API's lists, which the CLI's cursors share.
const (
	cursorWebhooks   = "webhooks"
	cursorDeliveries = "deliveries"
)

func (d *dbWebhooks) Stats(ctx context.Context, id uuid.UUID, q *statsQuery) (*webhooks.StatsView, error) {
	p, err := q.params()
	if err != nil {
		return nil, err
	}
	p.SubscriptionID = id
	v, err := webhooks.Stats(ctx, d.pool, p)
	return v, statsError(err)
}
