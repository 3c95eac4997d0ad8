package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
)

// TestConsole_BrokerDestination: a subscription to a broker shows its kind
// and its fields with the password masked, in the list and on its page,
// and an edit that leaves the URL empty keeps the destination.
func TestConsole_BrokerDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	var sub struct {
		ID string `json:"id"`
	}
	status := b.api(t, http.MethodPost, "/v1/webhooks", token, map[string]any{"space": "acme", "destination": map[string]any{
		"kind": "rabbitmq", "url": "amqp://bob:s3cret-pw@127.0.0.1:5672/prod", "exchange": "events"}}, &sub)
	require.Equal(t, http.StatusCreated, status)
	br := b.browser(t)
	br.signIn(token)

	list := br.get("/console/subscriptions")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.text(), "rabbitmq amqp://bob:********@127.0.0.1:5672/prod")
	require.NotContains(t, list.body, "s3cret-pw")

	p := br.get("/console/subscriptions/" + sub.ID)
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.text(), `id="subscription-destination" data-testid="subscription-destination">rabbitmq`)
	require.Contains(t, p.text(), "exchange: events")
	require.Contains(t, p.text(), "url: amqp://bob:********@127.0.0.1:5672/prod")
	require.NotContains(t, p.body, "s3cret-pw")

	edit := "/console/subscriptions/" + sub.ID + "/edit"
	form := url.Values{"csrf": {br.csrf(edit)}, "url": {""}, "event_types": {"item.*"}, "policy": {"ordered"}}
	res := br.post(edit, form)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	var after struct {
		EventTypes  []string       `json:"event_types"`
		Destination map[string]any `json:"destination"`
	}
	require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks/"+sub.ID, token, nil, &after))
	require.Equal(t, []string{"item.*"}, after.EventTypes)
	require.Equal(t, "rabbitmq", after.Destination["kind"], "the edit kept the broker destination")
}

// storedDestination is a subscription's destination fields as stored,
// credentials whole.
func (b *testBundle) storedDestination(t *testing.T, id string) map[string]any {
	t.Helper()
	var d map[string]any
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT destination FROM webhook_subscriptions WHERE id = $1`, id).Scan(&d))
	return d
}

// TestConsole_CreateBrokerDestination: the form offers every kind with the
// kind's fields; a RabbitMQ destination is created from it; a refused
// field is shown next to that field of the chosen kind, and the password
// typed is not in the page.
func TestConsole_CreateBrokerDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	br.signIn(token)

	form := br.get("/console/subscriptions/new")
	require.Equal(t, http.StatusOK, form.status)
	for _, id := range []string{`id="f-kind"`, `id="destination-http"`, `id="f-rabbitmq-url"`, `id="f-rabbitmq-exchange"`,
		`id="f-rabbitmq-routing_key"`, `id="f-jetstream-subject"`, `id="f-redis-key"`, `id="f-redis-maxlen"`, `id="f-mqtt-topic"`,
		`<script src="/console/static/destination.js" defer></script>`} {
		require.Contains(t, form.body, id)
	}

	post := func(v url.Values) *page {
		v.Set("csrf", br.csrf("/console/subscriptions/new"))
		v.Set("space", "acme")
		v.Set("policy", "ordered")
		return br.post("/console/subscriptions/new", v)
	}
	bad := post(url.Values{"kind": {"rabbitmq"}, "rabbitmq.url": {"amqp://bob:typed-pw-1@127.0.0.1:5672/prod"},
		"rabbitmq.exchange": {""}, "mqtt.url": {"mqtt://eve:other-pw-2@127.0.0.1:1883"}})
	require.Equal(t, http.StatusUnprocessableEntity, bad.status)
	require.Regexp(t, `id="field-rabbitmq-exchange"[^>]*>\s*<label[^>]*>exchange</label>\s*<input[^>]*>\s*<p class="field-error"[^>]*>invalid webhook subscription: destination.exchange: required`, bad.body)
	require.Equal(t, 1, strings.Count(bad.body, `class="field-error"`), "shown once, in the chosen kind's fieldset")
	require.NotContains(t, bad.body, "typed-pw-1")
	require.NotContains(t, bad.body, "other-pw-2")
	require.Contains(t, bad.body, `value="amqp://bob:********@127.0.0.1:5672/prod"`)
	require.Contains(t, bad.body, `data-testid="retype"`)

	maxlen := post(url.Values{"kind": {"redis"}, "redis.url": {"redis://127.0.0.1:6379"}, "redis.key": {"k"}, "redis.maxlen": {"many"}})
	require.Equal(t, http.StatusUnprocessableEntity, maxlen.status)
	require.Regexp(t, `id="field-redis-maxlen"(.|\n)*destination.maxlen: want a whole number`, maxlen.body)

	kind := post(url.Values{"kind": {"carrier-pigeon"}})
	require.Equal(t, http.StatusUnprocessableEntity, kind.status)
	require.Regexp(t, `id="field-kind"(.|\n)*destination.kind: &#34;carrier-pigeon&#34;`, kind.body)

	ok := post(url.Values{"kind": {"rabbitmq"}, "rabbitmq.url": {"amqp://bob:typed-pw-1@127.0.0.1:5672/prod"}, "rabbitmq.exchange": {"events"}})
	require.Equal(t, http.StatusOK, ok.status, ok.body)
	require.Contains(t, ok.body, `id="new-secret"`)
	require.NotContains(t, ok.body, "typed-pw-1")
	var list struct {
		Subscriptions []struct {
			ID          string         `json:"id"`
			Destination map[string]any `json:"destination"`
		} `json:"subscriptions"`
	}
	require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks?space=acme", token, nil, &list))
	require.Len(t, list.Subscriptions, 1)
	require.Equal(t, map[string]any{"kind": "rabbitmq", "url": "amqp://bob:********@127.0.0.1:5672/prod", "exchange": "events",
		"routing_key": "{space}.{type}"}, list.Subscriptions[0].Destination)
	require.Equal(t, "amqp://bob:typed-pw-1@127.0.0.1:5672/prod", b.storedDestination(t, list.Subscriptions[0].ID)["url"])
}

// TestConsole_EditBrokerDestination: the edit form shows the destination
// with its password masked; saving it with the mask left keeps the stored
// password while another field changes, typing a new one rotates it, and
// a mask with another host is refused next to the url.
func TestConsole_EditBrokerDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	var sub struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/webhooks", token, map[string]any{"space": "acme",
		"destination": map[string]any{"kind": "rabbitmq", "url": "amqp://bob:s3cret-pw@127.0.0.1:5672/prod", "exchange": "events"}}, &sub))
	br := b.browser(t)
	br.signIn(token)
	edit := "/console/subscriptions/" + sub.ID + "/edit"

	form := br.get(edit)
	require.Equal(t, http.StatusOK, form.status)
	require.NotContains(t, form.body, "s3cret-pw")
	require.Regexp(t, `<option value="rabbitmq" selected>`, form.body)
	require.Contains(t, form.body, `name="rabbitmq.url" value="amqp://bob:********@127.0.0.1:5672/prod"`)
	require.Contains(t, form.body, `name="rabbitmq.exchange" value="events"`)

	save := func(u, exchange string) *page {
		return br.post(edit, url.Values{"csrf": {br.csrf(edit)}, "policy": {"ordered"}, "kind": {"rabbitmq"},
			"rabbitmq.url": {u}, "rabbitmq.exchange": {exchange}, "rabbitmq.routing_key": {"{space}.{type}"}})
	}
	res := save("amqp://bob:********@127.0.0.1:5672/prod", "orders")
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	stored := b.storedDestination(t, sub.ID)
	require.Equal(t, "amqp://bob:s3cret-pw@127.0.0.1:5672/prod", stored["url"], "the mask kept the password")
	require.Equal(t, "orders", stored["exchange"])

	res = save("amqp://bob:********@127.0.0.9:5672/prod", "orders")
	require.Equal(t, http.StatusUnprocessableEntity, res.status)
	require.Regexp(t, `id="field-rabbitmq-url"(.|\n)*destination.url: \*\*\*\*\*\*\*\* stands for the stored credential`, res.body)

	res = br.post(edit, url.Values{"csrf": {br.csrf(edit)}, "policy": {"ordered"}, "kind": {"http"}, "url": {""}})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "http chosen without a URL")
	require.Regexp(t, `id="field-url"(.|\n)*class="field-error"`, res.body)
	require.Equal(t, "orders", b.storedDestination(t, sub.ID)["exchange"], "unchanged")

	res = save("amqp://bob:n3w-pw@127.0.0.1:5672/prod", "orders")
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, "amqp://bob:n3w-pw@127.0.0.1:5672/prod", b.storedDestination(t, sub.ID)["url"], "rotated")
	page := br.get("/console/subscriptions/" + sub.ID)
	require.NotContains(t, page.body, "n3w-pw")
	require.NotContains(t, br.get(edit).body, "n3w-pw")
}

// TestConsole_BrokerKindsAndTestSend: a subscription of each broker kind is
// created from the form as the API stores it, and the test send answers
// with what the broker said: MQTT's acknowledgement as "confirmed by the
// broker", JetStream's missing stream as the reason (the machine's brokers;
// nothing is left on them: no stream is made, the MQTT publish is not
// retained).
func TestConsole_BrokerKindsAndTestSend(t *testing.T) {
	t.Parallel()
	mqttAddr := brokertest.MQTT.Addr(t)
	natsAddr := brokertest.NATS.Addr(t)
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	br.signIn(token)
	create := func(kind string, fields map[string]string) string {
		t.Helper()
		v := url.Values{"csrf": {br.csrf("/console/subscriptions/new")}, "space": {"acme"}, "policy": {"ordered"}, "kind": {kind}}
		for k, x := range fields {
			v.Set(kind+"."+k, x)
		}
		res := br.post("/console/subscriptions/new", v)
		require.Equal(t, http.StatusOK, res.status, res.body)
		m := regexp.MustCompile(`href="/console/subscriptions/([0-9a-f-]+)"`).FindStringSubmatch(res.body)
		require.NotNil(t, m, res.body)
		return m[1]
	}
	testSend := func(id string) string {
		t.Helper()
		base := "/console/subscriptions/" + id
		res := br.post(base+"/test", url.Values{"csrf": {br.csrf(base + "/confirm/test")}})
		require.Equal(t, http.StatusOK, res.status, res.body)
		m := regexp.MustCompile(`data-testid="test-status">([^<]*)<`).FindStringSubmatch(res.body)
		require.NotNil(t, m, res.body)
		return m[1]
	}

	topic := brokertest.Name("console-test/")
	mqttSub := create("mqtt", map[string]string{"url": "mqtt://" + mqttAddr, "topic": topic + "/{type}"})
	require.Equal(t, "confirmed by the broker", testSend(mqttSub))

	subject := brokertest.Name("consoletest.nostream.")
	natsSub := create("jetstream", map[string]string{"url": "nats://" + natsAddr, "subject": subject + ".{type}"})
	status := testSend(natsSub)
	require.True(t, strings.HasPrefix(status, "none: "), status)
	require.Contains(t, status, subject)

	redisSub := create("redis", map[string]string{"url": "redis://:pw-redis-1@127.0.0.1:6379/3", "key": "bothy:{space}", "maxlen": "100"})
	for id, want := range map[string]map[string]any{
		mqttSub:  {"kind": "mqtt", "url": "mqtt://" + mqttAddr, "topic": topic + "/{type}"},
		natsSub:  {"kind": "jetstream", "url": "nats://" + natsAddr, "subject": subject + ".{type}"},
		redisSub: {"kind": "redis", "url": "redis://:********@127.0.0.1:6379/3", "key": "bothy:{space}", "maxlen": float64(100)},
	} {
		var got struct {
			Destination map[string]any `json:"destination"`
		}
		require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks/"+id, token, nil, &got))
		require.Equal(t, want, got.Destination)
	}
	require.Equal(t, "redis://:pw-redis-1@127.0.0.1:6379/3", b.storedDestination(t, redisSub)["url"])
	edit := br.get("/console/subscriptions/" + redisSub + "/edit")
	require.NotContains(t, edit.body, "pw-redis-1")
	require.Contains(t, edit.body, `name="redis.maxlen" value="100"`)
}
