package webhookhandoff

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/mqtt"
)

// topicsPerClient bounds the topics one MQTT client subscribes, so the
// receiver reads the broker's sockets in parallel.
const topicsPerClient = 25

// consumeMQTT subscribes at QoS 1 (so the broker queues for the receiver
// rather than drops) to every subscription's topic, up to topicsPerClient
// per client with a clean session, and decodes each payload's headers and
// body. Stopping disconnects the clients.
func (r *receiver) consumeMQTT(_ context.Context, b *brokerParams) (func(), error) {
	broker := "tcp://" + strings.TrimPrefix(b.URL, "mqtt://")
	var clients []paho.Client
	closeAll := func() {
		for _, c := range clients {
			c.Disconnect(250)
		}
	}
	for lo := 0; lo < len(r.endpoints); lo += topicsPerClient {
		o := paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("%s-%d", b.Name, lo)).
			SetCleanSession(true).SetAutoReconnect(false)
		c := paho.NewClient(o)
		clients = append(clients, c)
		filters := map[string]byte{}
		for i := lo; i < min(lo+topicsPerClient, len(r.endpoints)); i++ {
			filters[b.address(i)] = 1
		}
		err := waitToken(c.Connect())
		if err == nil {
			err = waitToken(c.SubscribeMultiple(filters, r.onMQTT))
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("mqtt: %w", err)
		}
	}
	return closeAll, nil
}

func waitToken(t paho.Token) error {
	if !t.WaitTimeout(10 * time.Second) {
		return fmt.Errorf("no answer within 10s")
	}
	return t.Error()
}

// onMQTT records one message: a payload of the signature headers and the
// signed body.
func (r *receiver) onMQTT(_ paho.Client, m paho.Message) {
	k, ok := subOf(m.Topic())
	if !ok {
		k = -1
	}
	var p mqtt.Payload
	header := http.Header{}
	if err := json.Unmarshal(m.Payload(), &p); err == nil {
		for name, v := range p.Headers {
			header.Set(name, v)
		}
	}
	r.deliver(k, header, []byte(p.Body))
}
