package consolebrowser

import (
	"context"
	"encoding/json"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// rabbitQueue is an exchange of the test's own with a queue bound to
// every routing key, and what arrived in the queue; both are deleted when
// the test ends.
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
	q := &rabbitQueue{exchange: "bothy-console-test-" + uuid.NewString()}
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
		_, _ = ch.QueueDelete(queue.Name, false, false, false)
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
	testwait.Until(t, 60*time.Second, func() bool {
		q.mu.Lock()
		got = append([]amqp.Delivery(nil), q.got...)
		q.mu.Unlock()
		return len(got) >= n
	}, "%d messages in the queue", n)
	return got
}

// pageSource is the page's markup as the browser has it, form values included.
func pageSource(b *Browser) string {
	return Run(b, chromedp.Evaluate[string](`document.documentElement.outerHTML +
		Array.from(document.querySelectorAll("input, textarea")).map(e => e.value).join("\n")`))
}

// TestConsole_RabbitMQDestination: a tenant creates a RabbitMQ destination
// in the console (the form shows the kind's fields alone), the space's
// events arrive in the tenant's queue in order, and the subscription's
// deliveries, attempts and stats are shown as for HTTP; a test send
// publishes; an edit that leaves the masked password keeps it, one with a
// new password rotates it (a wrong one makes the test send fail, the
// right one again makes it pass), and no page carries the password.
func TestConsole_RabbitMQDestination(t *testing.T) {
	t.Parallel()
	broker := tooltest.Need(t, tooltest.RabbitMQ)
	require.Contains(t, broker, ":guest@", "the test rotates the machine's guest password")
	q := newRabbitQueue(t, broker)
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)
	noPassword := func(t *testing.T, page string, pw string) {
		t.Helper()
		require.NotContains(t, pageSource(b), pw, "%s: the password is in the page", page)
	}

	b.Do(chromedp.Navigate(f.base+"/console/subscriptions/new"), shows("#subscription-form"), setValue("f-kind", "rabbitmq"))
	shown := Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("fieldset.destination"))
		.filter(e => e.getBoundingClientRect().height > 0).map(e => e.dataset.kind)`))
	require.Equal(t, []string{"rabbitmq"}, shown, "the chosen kind's fieldset alone is shown")
	b.Do(
		fill("space", "acme"),
		fill("rabbitmq-url", broker),
		fill("rabbitmq-exchange", q.exchange),
		fill("rabbitmq-routing_key", "console.{space}.{type}"),
		fill("event_types", "item.*"),
		fill("retry_base_seconds", "0.2"),
		fill("retry_max_seconds", "1"),
	)
	b.Screenshot("create-form-rabbitmq")
	b.DocScreenshot("create-form-rabbitmq", 1000, false)
	b.Do(chromedp.Click(chromedp.ID("form-submit")), shows(`[data-testid="new-secret"]`))
	noPassword(t, "result", ":guest@")
	b.Do(chromedp.Click(chromedp.ID("result-back")), shows("#subscription-id"))
	id := text(b, "#subscription-id")
	require.Equal(t, "rabbitmq exchange: "+q.exchange+" routing_key: console.{space}.{type} url: amqp://guest:********@127.0.0.1:5672/",
		text(b, "#subscription-destination"))

	f.appendEvents(t, f.aliceToken, "acme", 3)
	got := q.waitFor(t, 3)
	for i, m := range got {
		var env struct {
			Data struct{ N int } `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Body, &env))
		require.Equal(t, i, env.Data.N, "in order")
		require.Equal(t, "console.acme.item.created", m.RoutingKey)
	}
	f.waitDelivered(t, f.aliceToken, id, 3)

	openSubscription(f, b, id)
	require.Len(t, seqs(b), 3)
	for _, s := range Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('[data-testid="attempt-status"]'), e => e.innerText)`)) {
		require.Equal(t, "confirmed by the broker", s)
	}
	require.Contains(t, text(b, `#chart-attempts [data-testid="chart-summary"]`), "3")
	noPassword(t, "subscription", ":guest@")
	b.Screenshot("subscription-rabbitmq")
	b.DocScreenshot("subscription-rabbitmq", 1000, false)

	b.Do(chromedp.Click(testID("delivery-link")), shows("#message-body"),
		chromedp.Click(chromedp.CSS(`[data-testid="attempt-request"] summary`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="request-headers"]`)))
	require.Equal(t, "delivered", text(b, "#delivery-status"))
	require.Equal(t, "confirmed by the broker", text(b, `[data-testid="attempt-status"]`))
	require.Contains(t, text(b, `[data-testid="attempt-request"]`), "PUBLISH rabbitmq amqp://guest:********@127.0.0.1:5672/")
	noPassword(t, "delivery", ":guest@")

	testSend := func(t *testing.T) string {
		t.Helper()
		openSubscription(f, b, id)
		require.Equal(t, "Test message sent.", act(t, b, testID("action-test"), "test", nil, nil))
		return text(b, `[data-testid="test-status"]`)
	}
	require.Equal(t, "confirmed by the broker", testSend(t))
	require.Contains(t, string(q.waitFor(t, 4)[3].Body), `"type":"bothy.webhook.test"`)

	edit := func(url, routingKey string) {
		openSubscription(f, b, id)
		b.Do(chromedp.Click(chromedp.ID("action-edit")), shows("#subscription-form"))
		require.Equal(t, "rabbitmq", Run(b, chromedp.Evaluate[string](`document.getElementById("f-kind").value`)))
		noPassword(t, "edit", ":guest@")
		if url != "" {
			b.Do(fill("rabbitmq-url", url))
		}
		b.Do(fill("rabbitmq-routing_key", routingKey), chromedp.Click(chromedp.ID("form-submit")), shows("#saved-message"))
	}
	storedURL := func() string {
		var u string
		require.NoError(t, f.db.Pool.QueryRow(context.Background(), `SELECT destination->>'url' FROM webhook_subscriptions WHERE id = $1`, id).Scan(&u))
		return u
	}

	// The masked password left as it is: kept, and the next event is
	// published under the new routing key with it.
	edit("", "kept.{type}")
	require.Equal(t, broker, storedURL())
	f.appendEvents(t, f.aliceToken, "acme", 1)
	require.Equal(t, "kept.item.created", q.waitFor(t, 5)[4].RoutingKey)

	// A new password rotates it: a wrong one fails the test send, the
	// right one makes it pass again.
	const wrong = "rotated-pw-0042"
	wrongURL := strings.Replace(broker, ":guest@", ":"+wrong+"@", 1)
	edit(wrongURL, "kept.{type}")
	require.Equal(t, wrongURL, storedURL())
	noPassword(t, "saved", wrong)
	status := testSend(t)
	require.True(t, strings.HasPrefix(status, "none: "), status)
	noPassword(t, "test send", wrong)
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+id+"/edit"), shows("#subscription-form"))
	noPassword(t, "edit", wrong)
	edit(broker, "kept.{type}")
	require.Equal(t, broker, storedURL())
	require.Equal(t, "confirmed by the broker", testSend(t))
	noScriptRan(t, b)

	// The form at a phone's width: nothing scrolls sideways.
	b.Do(chromedp.EmulateViewport(phoneWidth, 740, chromedp.EmulateMobile),
		chromedp.Navigate(f.base+"/console/subscriptions/"+id+"/edit"), shows("#subscription-form"))
	w := Run(b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	require.Equal(t, phoneWidth, w[1])
	require.LessOrEqual(t, w[0], w[1], "the form is wider than the screen")
	b.Screenshot("phone-edit-rabbitmq")
	b.DocScreenshot("phone-edit-rabbitmq", phoneWidth, true)
}
