package mqtt_test

import (
	"encoding/json"
	"fmt"
	gosync "sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/mqtt"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// TestMQTT_Conformance runs the suite; MQTT cannot drop a repeat, so the
// suite counts the one its cut makes. MQTT 3.1.1 has no refusal of a
// publish (a broker acknowledges what its rules drop), so the refusal
// checked is the connection's: the egress policy refusing a private
// broker.
func TestMQTT_Conformance(t *testing.T) {
	t.Parallel()
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr: brokertest.MQTT.Addr(t),
		Setup: func(t *testing.T, through string, target *outbound.Target) *outboundtest.Place {
			b := setup(t)
			var mu gosync.Mutex
			var got []outboundtest.Arrival
			done := make(chan struct{})
			t.Cleanup(func() { close(done) })
			go func() {
				for {
					select {
					case m := <-b.received:
						var p mqtt.Payload
						if err := json.Unmarshal(m.Payload(), &p); err != nil {
							continue
						}
						mu.Lock()
						got = append(got, outboundtest.Arrival{Headers: p.Headers, Body: []byte(p.Body)})
						mu.Unlock()
					case <-done:
						return
					}
				}
			}()
			dest := func(p egress.Policy) outbound.Destination {
				c, err := mqtt.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"mqtt://%s","topic":"%s/{space}/{type}"}`, through, b.prefix)))
				require.NoError(t, err)
				pool := mqtt.NewPool(p, brokertest.Log)
				if brokertest.WithoutConfirms() {
					pool.SkipConfirms()
				}
				t.Cleanup(pool.Close)
				return pool.Destination(c, target)
			}
			return &outboundtest.Place{
				Dest:          dest(brokertest.Policy),
				Refusing:      dest(egress.Policy{}),
				RefusalReason: "webhooks.allow_private_targets",
				Received: func() []outboundtest.Arrival {
					mu.Lock()
					defer mu.Unlock()
					return append([]outboundtest.Arrival(nil), got...)
				},
			}
		},
	})
}

// TestMQTT_ConformanceFailsWithoutConfirms runs the conformance suite in a
// child process whose pool publishes at QoS 0, without a PUBACK, and wants
// it to fail where a send is answered before the broker confirmed: the cut
// test.
func TestMQTT_ConformanceFailsWithoutConfirms(t *testing.T) {
	t.Parallel()
	brokertest.MQTT.Addr(t)
	brokertest.RequireFailsWithoutConfirms(t, "TestMQTT_Conformance",
		"--- FAIL: TestMQTT_Conformance/DeliveredOnlyAfterConfirmationAndRetryOnCut",
		"while the broker's confirmation was held back")
}
