package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// rabbitURL is the machine's RabbitMQ (BOTHY_TEST_RABBITMQ_URL).
func rabbitURL(t *testing.T) string {
	t.Helper()
	return tooltest.Need(t, tooltest.RabbitMQ)
}

// rabbitQueue is an exchange of the test's own with a queue bound to
// every routing key, and what arrived in the queue.
type rabbitQueue struct {
	exchange string
	mu       gosync.Mutex
	got      []amqp.Delivery
}

func newRabbitQueue(t *testing.T, broker string) *rabbitQueue {
	t.Helper()
	conn, err := amqp.Dial(broker)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	q := &rabbitQueue{exchange: "bothy-test-" + uuid.NewString()}
	require.NoError(t, ch.ExchangeDeclare(q.exchange, "topic", false, false, false, false, nil))
	queue, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(queue.Name, "#", q.exchange, false, nil))
	msgs, err := ch.Consume(queue.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			q.mu.Lock()
			q.got = append(q.got, m)
			q.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ch.ExchangeDelete(q.exchange, false, false)
		_ = conn.Close()
		<-done
	})
	return q
}

// waitFor waits until n messages arrived and returns them in arrival order.
func (q *rabbitQueue) waitFor(t *testing.T, n int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	testwait.Until(t, 20*time.Second, func() bool {
		q.mu.Lock()
		got = append([]amqp.Delivery(nil), q.got...)
		q.mu.Unlock()
		return len(got) >= n
	}, "%d messages in the queue", n)
	return got
}

// TestAPI_WebhookRabbitMQ: a tenant creates a RabbitMQ subscription over
// the API, posts events, and they arrive in a queue bound to the exchange
// in order, signed; the deliveries, attempts and stats are listed as for
// HTTP, the credentials never come back whole, a test send works, and
// the credentials are rotated by PATCH.
func TestAPI_WebhookRabbitMQ(t *testing.T) {
	t.Parallel()
	broker := rabbitURL(t)
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	q := newRabbitQueue(t, broker)
	dest := func(url string) string {
		return fmt.Sprintf(`{"kind":"rabbitmq","url":%q,"exchange":%q,"routing_key":"bothy.{space}.{type}"}`, url, q.exchange)
	}
	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","destination":`+dest(broker)+`}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), ":guest@", "the broker's password never comes back")
	sub := r.json(t)
	secret := sub["secret"].(string)
	sp := "/v1/webhooks/" + sub["id"].(string)
	require.Equal(t, map[string]any{"kind": "rabbitmq", "url": "amqp://guest:********@127.0.0.1:5672/", "exchange": q.exchange,
		"routing_key": "bothy.{space}.{type}"}, sub["destination"])

	t.Run("EventsArriveInOrderSignedAndAreListedAsDelivered", func(t *testing.T) {
		const n = 5
		body := `{"events":[`
		for i := range n {
			if i > 0 {
				body += ","
			}
			body += fmt.Sprintf(`{"type":"item.created","data":{"n":%d}}`, i)
		}
		r := b.do(t, "POST", "/v1/spaces/s1/events", owner, body+`]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		got := q.waitFor(t, n)
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		var lastSeq float64
		for i, m := range got {
			h := http.Header{}
			for k, v := range m.Headers {
				h.Set(k, fmt.Sprint(v))
			}
			require.NoError(t, wh.Verify(m.Body, h), "message %d", i)
			var env map[string]any
			require.NoError(t, json.Unmarshal(m.Body, &env))
			require.Equal(t, env["id"], m.MessageId, "the message id is the event's")
			require.Equal(t, "bothy.s1.item.created", m.RoutingKey)
			require.Equal(t, amqp.Persistent, m.DeliveryMode)
			require.Greater(t, env["seq"].(float64), lastSeq, "in seq order")
			lastSeq = env["seq"].(float64)
		}
		var page struct {
			Deliveries []struct {
				Seq         int64            `json:"seq"`
				Status      string           `json:"status"`
				AttemptList []map[string]any `json:"attempt_list"`
			} `json:"deliveries"`
		}
		testwait.Until(t, 20*time.Second, func() bool {
			r := b.do(t, "GET", sp+"/deliveries", owner, "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.NoError(t, json.Unmarshal(r.body, &page))
			delivered := 0
			for _, d := range page.Deliveries {
				if d.Status == "delivered" {
					delivered++
				}
			}
			return delivered == n
		}, "%d deliveries listed as delivered", n)
		for _, d := range page.Deliveries {
			require.Len(t, d.AttemptList, 1)
			require.Nil(t, d.AttemptList[0]["status_code"], "a broker answers no HTTP status")
			require.Empty(t, d.AttemptList[0]["error"])
		}
		detail := b.do(t, "GET", fmt.Sprintf("%s/deliveries/%d", sp, page.Deliveries[0].Seq), owner, "")
		require.Equal(t, http.StatusOK, detail.status, "%s", detail.body)
		req := detail.json(t)["request"].(map[string]any)
		require.Equal(t, "PUBLISH", req["method"])
		require.Equal(t, "rabbitmq amqp://guest:********@127.0.0.1:5672/", req["url"])
		st := b.do(t, "GET", sp+"/stats", owner, "").json(t)
		require.EqualValues(t, n, st["ok"], "a broker's confirmation counts as ok")
	})

	t.Run("TestSendPublishesToTheExchange", func(t *testing.T) {
		before := len(q.waitFor(t, 0))
		res := b.do(t, "POST", sp+"/test", owner, "").json(t)
		require.Equal(t, true, res["ok"], "%v", res)
		m := q.waitFor(t, before+1)[before]
		require.Equal(t, res["message_id"], m.MessageId)
		require.Contains(t, string(m.Body), `"type":"bothy.webhook.test"`)
	})

	t.Run("PatchRotatesTheCredentials", func(t *testing.T) {
		wrong := "amqp://guest:wrong-password@127.0.0.1:5672/"
		r := b.do(t, "PATCH", sp, owner, `{"destination":`+dest(wrong)+`}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.NotContains(t, string(r.body), "wrong-password")
		res := b.do(t, "POST", sp+"/test", owner, "").json(t)
		require.Equal(t, false, res["ok"])
		require.NotContains(t, res["error"], "wrong-password")
		r = b.do(t, "PATCH", sp, owner, `{"destination":`+dest(broker)+`}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, true, b.do(t, "POST", sp+"/test", owner, "").json(t)["ok"])
	})

	t.Run("BadFieldsAre422NamingTheField", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"space":"s1","destination":{"kind":"rabbitmq","url":"amqp://h/"}}`:                           "destination.exchange",
			`{"space":"s1","destination":{"kind":"rabbitmq","url":"http://h/","exchange":"x"}}`:            "destination.url",
			`{"space":"s1","destination":{"kind":"kafka"}}`:                                                "destination.kind",
			`{"space":"s1","destination":{"exchange":"x"}}`:                                                "destination.kind",
			`{"space":"s1","destination":` + dest(broker) + `,"max_batch":10}`:                             "max_batch",
			`{"space":"s1","destination":{"kind":"rabbitmq","url":"amqp://u:pw@h/","exchange":"x","q":1}}`: "destination",
		} {
			d := b.do(t, "POST", "/v1/webhooks", owner, body).problem(t, http.StatusUnprocessableEntity)
			require.Contains(t, d, want, body)
			require.NotContains(t, d, "pw@")
		}
		d := b.do(t, "PATCH", sp, owner, `{"max_batch":10}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, "max_batch")
	})
}

// TestAPI_WebhookRabbitMQRefusedAddress: the egress policy checks a
// broker's address as it checks a receiver's URL.
func TestAPI_WebhookRabbitMQRefusedAddress(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "all", "webhooks.allow_private_targets", "false")}
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	d := b.do(t, "POST", "/v1/webhooks", owner,
		`{"space":"s1","destination":{"kind":"rabbitmq","url":"amqp://u:pw@127.0.0.1:5672/","exchange":"x"}}`).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, d, "destination.url")
	require.Contains(t, d, "webhooks.allow_private_targets")
}
