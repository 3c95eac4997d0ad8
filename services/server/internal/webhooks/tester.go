package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/kinds"
)

// TypeTest is the type of a test message. It is sent only by Tester and
// never appended to the log.
const TypeTest = "bothy.webhook.test"

// SystemActor is the actor of the messages and events bothy makes itself
// (test messages, operational events). It is not a principal.
const SystemActor = "bothy"

// Tester sends test messages to subscriptions' destinations (an HTTP
// receiver, a broker): signed and carrying the custom headers like any
// delivery, through the same destinations and egress policy (packages
// outbound and kinds), but outside the log. It is safe for concurrent use;
// Close lets its broker connections go.
type Tester struct {
	dests *outbound.Destinations
}

// TesterConfig configures a Tester; zero values are the deliveries'
// defaults.
type TesterConfig struct {
	// AllowPrivateTargets lets connections reach loopback and private
	// addresses (webhooks.allow_private_targets). Default false.
	AllowPrivateTargets bool
	// Timeout bounds the attempt, connect to last byte read
	// (webhooks.timeout). Default 15s.
	Timeout time.Duration
	// MaxResponseBytes is the most of a response body read
	// (webhooks.max_response_bytes). Default 64 KiB.
	MaxResponseBytes int
	// Logger for the broker connections. Default slog.Default().
	Logger *slog.Logger
}

// NewTester returns a tester.
func NewTester(cfg *TesterConfig) (*Tester, error) {
	c := TesterConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Timeout < 0 || c.MaxResponseBytes < 0 {
		return nil, errors.New("webhooks tester config: Timeout and MaxResponseBytes must not be negative")
	}
	return &Tester{dests: kinds.All.Open(&outbound.OpenParams{Policy: egress.Policy{AllowPrivate: c.AllowPrivateTargets},
		Timeout: cmp.Or(c.Timeout, 15*time.Second), MaxResponseBytes: cmp.Or(c.MaxResponseBytes, 64<<10), Logger: c.Logger})}, nil
}

// Close closes the connections the tester opened to brokers.
func (t *Tester) Close() { t.dests.Close() }

// TestResult is what a test send found out.
type TestResult struct {
	// MessageID is the test message's webhook-id: fresh for every test,
	// so a receiver that deduplicates does not drop it.
	MessageID uuid.UUID
	// StatusCode is the receiver's answer; 0 when none came (refused
	// address, connection error, timeout).
	StatusCode int
	// Latency is from sending the request to the end of the (capped)
	// response body.
	Latency time.Duration
	// Error says why the test failed ("" for a 2xx), without the URL.
	Error string
	// ResponseExcerpt is the start of the response body (1 KiB at most).
	ResponseExcerpt string
}

// testSubSQL reads what a test send needs, in one statement and no
// transaction.
const testSubSQL = `
SELECT space, url, secret, CASE WHEN previous_secret_until > now() THEN coalesce(previous_secret, '') ELSE '' END, headers,
    destination_kind, destination
FROM webhook_subscriptions WHERE id = $1`

// Send sends one test message to the subscription's receiver, whatever the
// subscription's status, and reports the answer. The message is an event
// envelope of type TypeTest with seq 0 and data {"subscription_id": id},
// signed with the current secret (and the previous one during a rotation's
// overlap). The subscription is read in one statement before the request;
// no transaction and no pool connection is held while it is sent
// (TestTester_Send), and nothing is recorded. An error is returned only for
// an unknown subscription or a failed read; the receiver's failures are in
// the result.
func (t *Tester) Send(ctx context.Context, q authz.Querier, id uuid.UUID) (*TestResult, error) {
	var tg outbound.Target
	var space string
	err := q.QueryRow(ctx, testSubSQL, id).Scan(&space, &tg.URL, &tg.Secret, &tg.PreviousSecret, &tg.Headers,
		&tg.Kind, &tg.Config)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read webhook subscription %s: %w", id, err)
	}
	msgID, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	ev := sync.Event{ID: msgID, Space: space, Type: TypeTest, Actor: SystemActor, OccurredAt: time.Now(),
		Data: json.RawMessage(fmt.Sprintf(`{"subscription_id":%q}`, id))}
	msg, err := outbound.SingleMessage(&ev)
	if err != nil {
		return nil, err
	}
	a := t.send(ctx, &tg, &msg)
	res := &TestResult{MessageID: msgID, StatusCode: a.StatusCode, Latency: a.Duration, Error: a.Err, ResponseExcerpt: a.Excerpt}
	if res.Error == "" && a.Kind != outbound.Delivered {
		res.Error = fmt.Sprintf("receiver answered %d %s", a.StatusCode, http.StatusText(a.StatusCode))
	}
	return res, nil
}

// send sends msg to tg's destination.
func (t *Tester) send(ctx context.Context, tg *outbound.Target, msg *outbound.Message) outbound.Answer {
	dest, err := t.dests.For(tg)
	if err != nil {
		return outbound.Answer{Kind: outbound.Retry, Err: err.Error()}
	}
	return dest.Send(ctx, msg, time.Now())
}
