package rabbitmq_test

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/rabbitmq"
)

// noConfirmsEnv makes TestRabbitMQ_Conformance publish without confirms;
// only TestRabbitMQ_ConformanceFailsWithoutConfirms sets it, in a child.
const noConfirmsEnv = "BOTHY_TEST_RABBITMQ_NO_CONFIRMS"

// brokerURL is the machine's RabbitMQ (BOTHY_TEST_RABBITMQ_URL).
func brokerURL(t testing.TB) string {
	t.Helper()
	return tooltest.Need(t, tooltest.RabbitMQ)
}

// viaAddr returns u with its host:port replaced by addr.
func viaAddr(t *testing.T, u, addr string) string {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	pu.Host = addr
	return pu.String()
}

// place is an exchange of its own with a queue bound to every key, and a
// consumer recording what arrives; both are deleted at the test's end.
type place struct {
	exchange string
	mu       gosync.Mutex
	got      []outboundtest.Arrival
}

func newPlace(t testing.TB, broker string) *place {
	t.Helper()
	conn, err := amqp.Dial(broker)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	p := &place{exchange: "bothy-test-" + uuid.NewString()}
	require.NoError(t, ch.ExchangeDeclare(p.exchange, "topic", false, true, false, false, nil))
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(q.Name, "#", p.exchange, false, nil))
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			p.add(m)
		}
	}()
	t.Cleanup(func() {
		_ = ch.ExchangeDelete(p.exchange, false, false)
		_ = conn.Close() // the exclusive queue goes with it
		<-done
	})
	return p
}

func (p *place) add(m amqp.Delivery) {
	h := map[string]string{}
	for k, v := range m.Headers {
		if s, ok := v.(string); ok {
			h[k] = s
		}
	}
	h["X-Amqp-Message-Id"] = m.MessageId
	h["X-Amqp-Routing-Key"] = m.RoutingKey
	h["X-Amqp-Persistent"] = map[bool]string{true: "yes", false: "no"}[m.DeliveryMode == amqp.Persistent]
	p.mu.Lock()
	p.got = append(p.got, outboundtest.Arrival{Headers: h, Body: m.Body})
	p.mu.Unlock()
}

func (p *place) received() []outboundtest.Arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]outboundtest.Arrival(nil), p.got...)
}

// newPool returns a pool reaching loopback, closed at the test's end.
func newPool(t testing.TB) *rabbitmq.Pool {
	t.Helper()
	pool := rabbitmq.NewPool(egress.Policy{AllowPrivate: true}, slog.New(slog.DiscardHandler))
	if os.Getenv(noConfirmsEnv) != "" {
		pool.SkipConfirms()
	}
	t.Cleanup(pool.Close)
	return pool
}

func config(t testing.TB, raw string) rabbitmq.Config {
	t.Helper()
	c, err := rabbitmq.ParseConfig(json.RawMessage(raw))
	require.NoError(t, err)
	return c
}

func TestRabbitMQ_Conformance(t *testing.T) {
	broker := brokerURL(t)
	pu, err := url.Parse(broker)
	require.NoError(t, err)
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr: pu.Host,
		Setup: func(t *testing.T, addr string, target *outbound.Target) *outboundtest.Place {
			p := newPlace(t, broker)
			pool := newPool(t)
			via := viaAddr(t, broker, addr)
			good := config(t, `{"url":`+quote(via)+`,"exchange":`+quote(p.exchange)+`}`)
			missing := config(t, `{"url":`+quote(via)+`,"exchange":"bothy-test-missing-`+uuid.NewString()+`"}`)
			return &outboundtest.Place{Dest: pool.Destination(good, target), Refusing: pool.Destination(missing, target),
				RefusalReason: "NOT_FOUND", Received: p.received}
		},
	})
}

// TestRabbitMQ_ConformanceFailsWithoutConfirms runs the conformance suite
// in a child process whose pool publishes without confirm mode and wants
// it to fail where a send is answered before the broker confirmed.
func TestRabbitMQ_ConformanceFailsWithoutConfirms(t *testing.T) {
	brokerURL(t)
	if os.Getenv(noConfirmsEnv) != "" {
		return // the child runs only the suite
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRabbitMQ_Conformance$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noConfirmsEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suite passed without publisher confirms:\n%s", out)
	require.Contains(t, string(out), "--- FAIL: TestRabbitMQ_Conformance/DeliveredOnlyAfterConfirmationAndRetryOnCut")
	require.Contains(t, string(out), "while the broker's confirmation was held back")
	require.Contains(t, string(out), "--- FAIL: TestRabbitMQ_Conformance/RefusalIsRetryWithReason")
	require.Contains(t, string(out), "a refusal must be Retry, was answered delivered")
}

func TestDestination_Send(t *testing.T) {
	broker := brokerURL(t)
	target := &outbound.Target{Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}

	t.Run("PublishesPersistentUnderTheTemplateWithTheEventID", func(t *testing.T) {
		p := newPlace(t, broker)
		c := config(t, `{"url":`+quote(broker)+`,"exchange":`+quote(p.exchange)+`,"routing_key":"bothy.{space}.{type}.{seq}"}`)
		m := outboundtest.Message("s1", 42)
		a := newPool(t).Destination(c, target).Send(t.Context(), m, time.Now())
		require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		got := waitOne(t, p)
		require.Equal(t, m.ID, got.Headers["X-Amqp-Message-Id"])
		require.Equal(t, "bothy.s1.item.created.42", got.Headers["X-Amqp-Routing-Key"])
		require.Equal(t, "yes", got.Headers["X-Amqp-Persistent"])
		require.Equal(t, m.ID, got.ID())
	})

	t.Run("ConcurrentSendsAreEachConfirmed", func(t *testing.T) {
		p := newPlace(t, broker)
		c := config(t, `{"url":`+quote(broker)+`,"exchange":`+quote(p.exchange)+`}`)
		d := newPool(t).Destination(c, target)
		const n = 50
		answers := make(chan outbound.Answer, n)
		var wg gosync.WaitGroup
		for i := range n {
			wg.Go(func() { answers <- d.Send(t.Context(), outboundtest.Message("s1", int64(i+1)), time.Now()) })
		}
		wg.Wait()
		close(answers)
		for a := range answers {
			require.Equal(t, outbound.Delivered, a.Kind, a.Err)
		}
		testwait.Until(t, 10*time.Second, func() bool { return len(p.received()) >= n }, "%d messages to arrive", n)
	})

	t.Run("UnroutableIsRetryWithTheBrokersReason", func(t *testing.T) {
		conn, err := amqp.Dial(broker)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		require.NoError(t, err)
		ex := "bothy-test-unbound-" + uuid.NewString()
		require.NoError(t, ch.ExchangeDeclare(ex, "topic", false, false, false, false, nil))
		t.Cleanup(func() { _ = ch.ExchangeDelete(ex, false, false) })
		c := config(t, `{"url":`+quote(broker)+`,"exchange":`+quote(ex)+`}`)
		a := newPool(t).Destination(c, target).Send(t.Context(), outboundtest.Message("s1", 1), time.Now())
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "NO_ROUTE")
	})

	t.Run("BrokerOutageIsRetryThenBackoff", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close()) // nothing listens there now
		c := config(t, `{"url":"amqp://guest:secret-pw@`+addr+`/","exchange":"x"}`)
		d := newPool(t).Destination(c, target)
		a := d.Send(t.Context(), outboundtest.Message("s1", 1), time.Now())
		require.Equal(t, outbound.Retry, a.Kind)
		require.NotContains(t, a.Err, "secret-pw")
		a = d.Send(t.Context(), outboundtest.Message("s1", 1), time.Now())
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, "dialling again in")
	})

	t.Run("RefusedAddressIsRetryNamingTheSetting", func(t *testing.T) {
		pool := rabbitmq.NewPool(egress.Policy{}, slog.New(slog.DiscardHandler))
		t.Cleanup(pool.Close)
		c := config(t, `{"url":`+quote(broker)+`,"exchange":"x"}`)
		a := pool.Destination(c, target).Send(t.Context(), outboundtest.Message("s1", 1), time.Now())
		require.Equal(t, outbound.Retry, a.Kind)
		require.Contains(t, a.Err, outbound.AllowPrivateTargetsKey)
	})
}

func waitOne(t *testing.T, p *place) outboundtest.Arrival {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() bool { return len(p.received()) > 0 }, "a message to arrive")
	return p.received()[0]
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ raw, wantErr string }{
		"MissingURL":          {`{"exchange":"x"}`, "destination.url: required"},
		"HTTPScheme":          {`{"url":"http://h/","exchange":"x"}`, "destination.url: scheme must be amqp or amqps"},
		"QueryRefused":        {`{"url":"amqp://h/?certfile=/etc/passwd","exchange":"x"}`, "destination.url: query parameters"},
		"MissingExchange":     {`{"url":"amqp://h/"}`, "destination.exchange: required"},
		"UnknownPlaceholder":  {`{"url":"amqp://h/","exchange":"x","routing_key":"{owner}"}`, "destination.routing_key:"},
		"UnknownField":        {`{"url":"amqp://h/","exchange":"x","queue":"q"}`, `destination: unknown field "queue"`},
		"ExchangeTooLong":     {`{"url":"amqp://h/","exchange":"` + long(256) + `"}`, "destination.exchange: at most 255 bytes"},
		"AcceptsTheTemplates": {`{"url":"amqps://u:p@h:5671/v","exchange":"x","routing_key":"a.{space}.{type}.{seq}"}`, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rabbitmq.ParseConfig(json.RawMessage(tc.raw))
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.NotContains(t, err.Error(), "/etc/passwd")
		})
	}
}

func TestConfig_RedactedAndAddr(t *testing.T) {
	t.Parallel()
	c, err := rabbitmq.ParseConfig(json.RawMessage(`{"url":"amqp://bob:s3cret@mq.example:5673/prod","exchange":"x"}`))
	require.NoError(t, err)
	r := c.Redacted()
	require.Equal(t, "amqp://bob:********@mq.example:5673/prod", r.URL)
	require.Equal(t, "{space}.{type}", r.RoutingKey)
	require.Equal(t, "mq.example:5673", c.Addr())
	c2, err := rabbitmq.ParseConfig(json.RawMessage(`{"url":"amqp://mq.example/","exchange":"x"}`))
	require.NoError(t, err)
	require.Equal(t, "mq.example:5672", c2.Addr())
	require.Equal(t, "amqp://mq.example/", c2.Redacted().URL)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func long(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'e'
	}
	return string(b)
}
