package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// TypeTest is the type of a test message. It is sent only by Tester and
// never appended to the log.
const TypeTest = "bothy.webhook.test"

// SystemActor is the actor of the messages and events bothy makes itself
// (test messages, operational events). It is not a principal.
const SystemActor = "bothy"

// Tester sends test messages to subscriptions' receivers: signed and
// carrying the custom headers like any delivery, through the same request
// building, HTTP client and egress policy (Deliverer.send), but outside the
// log. It is safe for concurrent use.
type Tester struct {
	d *Deliverer
}

// NewTester returns a tester; cfg's AllowPrivateTargets, Timeout and
// MaxResponseBytes apply as they do to deliveries, the rest is unused.
func NewTester(cfg *DeliverConfig) (*Tester, error) {
	d, err := NewDeliverer(nil, nil, nil, cfg)
	if err != nil {
		return nil, err
	}
	return &Tester{d: d}, nil
}

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
SELECT space, url, secret, CASE WHEN previous_secret_until > now() THEN coalesce(previous_secret, '') ELSE '' END, headers
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
	var tg target
	var space string
	err := q.QueryRow(ctx, testSubSQL, id).Scan(&space, &tg.url, &tg.secret, &tg.previousSecret, &tg.headers)
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
	msg, err := singleMessage(&ev)
	if err != nil {
		return nil, err
	}
	a := t.send(ctx, &tg, &msg)
	res := &TestResult{MessageID: msgID, StatusCode: a.statusCode, Latency: a.duration, Error: a.err, ResponseExcerpt: a.excerpt}
	if res.Error == "" && a.kind != resultDelivered {
		res.Error = fmt.Sprintf("receiver answered %d %s", a.statusCode, http.StatusText(a.statusCode))
	}
	return res, nil
}

// send makes one request of msg to tg.
func (t *Tester) send(ctx context.Context, tg *target, msg *message) answer {
	req, err := newRequest(ctx, tg, msg, time.Now())
	if err != nil {
		return answer{kind: resultRetry, err: err.Error()}
	}
	return post(t.d.client, req, t.d.cfg.MaxResponseBytes)
}
