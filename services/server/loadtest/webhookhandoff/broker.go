package webhookhandoff

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Destination kinds the load test can deliver to: an HTTP receiver, or a
// broker the receiver consumes from.
const (
	destHTTP      = "http"
	destRabbitMQ  = "rabbitmq"
	destJetStream = "jetstream"
	destRedis     = "redis"
	destMQTT      = "mqtt"
)

// brokerURLs are, per broker kind, the variable naming its URL (as the
// tests read it) and the local broker's URL when the variable is unset.
var brokerURLs = map[string][2]string{
	destRabbitMQ:  {"BOTHY_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"},
	destJetStream: {"BOTHY_TEST_NATS_URL", "nats://127.0.0.1:4222"},
	destRedis:     {"BOTHY_TEST_REDIS_URL", "redis://127.0.0.1:6379"},
	destMQTT:      {"BOTHY_TEST_MQTT_URL", "mqtt://127.0.0.1:1883"},
}

// brokerParams is the broker the subscriptions publish to. Name is the
// run's own: an exchange, a stream's subjects, stream keys or topics under
// it, which the receiver creates (where the broker needs it) and removes.
type brokerParams struct {
	Kind string `json:"kind"`
	URL  string `json:"url"`
	Name string `json:"name"`
}

// newBroker names this run's place on the broker of kind at url.
func newBroker(kind, url string) *brokerParams {
	id := uuid.NewString()
	name := "bothy-perf-" + id
	if kind == destJetStream { // a stream name and a subject token
		name = "bothyperf_" + strings.ReplaceAll(id, "-", "")
	}
	return &brokerParams{Kind: kind, URL: url, Name: name}
}

// address is where subscription k's messages go: a routing key, subject,
// stream key or topic with no placeholder, so that each subscription's
// messages reach its own queue, subscription or stream and no other.
func (b *brokerParams) address(k int) string {
	switch b.Kind {
	case destJetStream:
		return b.Name + ".sub." + strconv.Itoa(k)
	case destRedis:
		return b.Name + ":" + strconv.Itoa(k)
	case destMQTT:
		return b.Name + "/sub/" + strconv.Itoa(k)
	}
	return "sub." + strconv.Itoa(k)
}

// subOf is the subscription index at the end of an address.
func subOf(address string) (int, bool) {
	i := strings.LastIndexAny(address, "./:")
	k, err := strconv.Atoi(address[i+1:])
	return k, err == nil
}

// destination is subscription k's destination object for the API.
func (b *brokerParams) destination(k int) (json.RawMessage, error) {
	d := map[string]string{"kind": b.Kind, "url": b.URL}
	switch b.Kind {
	case destRabbitMQ:
		d["exchange"], d["routing_key"] = b.Name, b.address(k)
	case destJetStream:
		d["subject"], d["stream"] = b.address(k), b.Name
	case destRedis:
		d["key"] = b.address(k)
	case destMQTT:
		d["topic"] = b.address(k)
	}
	return json.Marshal(d)
}

// consumeBroker creates what the broker needs before the first message
// (an exchange and queues, a stream) and starts consuming every
// subscription's messages until ctx is done. stop, called after that,
// waits for the consumers and removes what the run created.
func (r *receiver) consumeBroker(ctx context.Context, b *brokerParams) (stop func(), err error) {
	switch b.Kind {
	case destRabbitMQ:
		return r.consumeRabbitMQ(ctx, b)
	case destJetStream:
		return r.consumeJetStream(ctx, b)
	case destRedis:
		return r.consumeRedis(ctx, b)
	case destMQTT:
		return r.consumeMQTT(ctx, b)
	}
	return nil, fmt.Errorf("no consumer for destination kind %q", b.Kind)
}

// deliver records one message of subscription i as the HTTP receiver
// records a request: the kit verifies its signature headers over its body
// with the Standard Webhooks library, then each envelope it holds counts.
func (r *receiver) deliver(i int, header http.Header, body []byte) {
	if i < 0 || i >= len(r.endpoints) {
		r.mu.Lock()
		r.stats.Requests++
		r.stats.Unexpected++
		r.mu.Unlock()
		return
	}
	r.kit.Accept(strconv.Itoa(i), header, body)
}
