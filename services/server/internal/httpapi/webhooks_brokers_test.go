package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// brokerPlace is a place of the test's own on one of the machine's
// brokers, the destination object that sends there, and what arrived.
type brokerPlace struct {
	// dest is the destination object, credentials whole; shown is its
	// url as the API shows it, and secret what must never come back.
	dest, shown, secret string
	// badField is a destination object with a bad field, and the field.
	bad, badField string
	// arrivals returns what arrived so far, in order.
	arrivals func(t *testing.T) []outboundtest.Arrival
}

func natsPlace(t *testing.T) *brokerPlace {
	addr := brokertest.NATS.Addr(t)
	nc, err := nats.Connect("nats://" + addr)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	name, prefix := brokertest.Name("BOTHYTEST_"), brokertest.Name("bothytest")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return &brokerPlace{
		dest:     fmt.Sprintf(`{"kind":"jetstream","url":"nats://bob:s3cret-pw@%s","subject":"%s.{space}.{type}","stream":%q}`, addr, prefix, name),
		shown:    "nats://bob:********@" + addr,
		secret:   "s3cret-pw",
		bad:      `{"kind":"jetstream","url":"nats://h","subject":"a.*"}`,
		badField: "destination.subject",
		arrivals: func(t *testing.T) []outboundtest.Arrival {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := stream.Info(ctx)
			require.NoError(t, err)
			var out []outboundtest.Arrival
			for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
				m, err := stream.GetMsg(ctx, seq)
				require.NoError(t, err)
				h := map[string]string{}
				for k := range m.Header {
					h[k] = m.Header.Get(k)
				}
				out = append(out, outboundtest.Arrival{Headers: h, Body: m.Data})
			}
			return out
		},
	}
}

func redisPlace(t *testing.T) *brokerPlace {
	addr := brokertest.Redis.Addr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	key := brokertest.Name("bothytest:")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Del(ctx, key).Err()
		_ = client.Close()
	})
	return &brokerPlace{
		// The machine's Redis asks for no password, and refuses one.
		dest:     fmt.Sprintf(`{"kind":"redis","url":"redis://%s/0","key":%q,"maxlen":1000}`, addr, key),
		shown:    "redis://" + addr + "/0",
		secret:   "no secret",
		bad:      `{"kind":"redis","url":"redis://h","key":"k","maxlen":-5}`,
		badField: "destination.maxlen",
		arrivals: func(t *testing.T) []outboundtest.Arrival {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			es, err := client.XRange(ctx, key, "-", "+").Result()
			require.NoError(t, err)
			var out []outboundtest.Arrival
			for _, e := range es {
				a := outboundtest.Arrival{Headers: map[string]string{}}
				for k, v := range e.Values {
					s, _ := v.(string)
					switch k {
					case "body":
						a.Body = []byte(s)
					case "id", "seq":
					default:
						a.Headers[k] = s
					}
				}
				out = append(out, a)
			}
			return out
		},
	}
}

func mqttPlace(t *testing.T) *brokerPlace {
	addr := brokertest.MQTT.Addr(t)
	prefix := brokertest.Name("bothytest")
	var mu gosync.Mutex
	var got []outboundtest.Arrival
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(brokertest.Name("bothytest-sub-")).
		SetCleanSession(true).SetAutoReconnect(false))
	tok := c.Connect()
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { c.Disconnect(250) })
	tok = c.Subscribe(prefix+"/#", 1, func(_ paho.Client, m paho.Message) {
		var p struct {
			Headers map[string]string `json:"headers"`
			Body    string            `json:"body"`
		}
		if json.Unmarshal(m.Payload(), &p) == nil {
			mu.Lock()
			got = append(got, outboundtest.Arrival{Headers: p.Headers, Body: []byte(p.Body)})
			mu.Unlock()
		}
	})
	require.True(t, tok.WaitTimeout(10*time.Second))
	require.NoError(t, tok.Error())
	return &brokerPlace{
		dest:     fmt.Sprintf(`{"kind":"mqtt","url":"mqtt://bob:s3cret-pw@%s","topic":"%s/{space}/{type}"}`, addr, prefix),
		shown:    "mqtt://bob:********@" + addr,
		secret:   "s3cret-pw",
		bad:      `{"kind":"mqtt","url":"mqtt://h","topic":"a/#"}`,
		badField: "destination.topic",
		arrivals: func(*testing.T) []outboundtest.Arrival {
			mu.Lock()
			defer mu.Unlock()
			return append([]outboundtest.Arrival(nil), got...)
		},
	}
}

// TestAPI_WebhookBrokers: for each broker kind, a tenant creates a
// subscription over the API, posts events, and they arrive on the broker
// in order, signed; the deliveries are listed as delivered, the
// credentials never come back whole, a test send arrives, and a bad field
// is a 422 naming it.
func TestAPI_WebhookBrokers(t *testing.T) {
	t.Parallel()
	for kind, place := range map[string]func(*testing.T) *brokerPlace{
		"NATSJetStream": natsPlace, "RedisStream": redisPlace, "MQTT": mqttPlace,
	} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			p := place(t)
			b := setup(t)
			owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
			r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","destination":`+p.dest+`}`)
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			require.NotContains(t, string(r.body), p.secret, "the broker's password never comes back")
			sub := r.json(t)
			require.Equal(t, p.shown, sub["destination"].(map[string]any)["url"])
			sp := "/v1/webhooks/" + sub["id"].(string)

			const n = 5
			body := `{"events":[`
			for i := range n {
				if i > 0 {
					body += ","
				}
				body += fmt.Sprintf(`{"type":"item.created","data":{"n":%d}}`, i)
			}
			r = b.do(t, "POST", "/v1/spaces/s1/events", owner, body+`]}`)
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			got := waitBrokerArrivals(t, p, n)
			require.Len(t, got, n)
			wh, err := standardwebhooks.NewWebhook(sub["secret"].(string))
			require.NoError(t, err)
			var lastSeq float64
			for i, a := range got {
				h := http.Header{}
				for k, v := range a.Headers {
					h.Set(k, v)
				}
				require.NoError(t, wh.Verify(a.Body, h), "message %d", i)
				var env map[string]any
				require.NoError(t, json.Unmarshal(a.Body, &env))
				require.Equal(t, env["id"], a.ID(), "the webhook-id is the event's")
				require.Greater(t, env["seq"].(float64), lastSeq, "in seq order")
				lastSeq = env["seq"].(float64)
			}
			waitBrokerDelivered(t, b, owner, sp, n)

			res := b.do(t, "POST", sp+"/test", owner, "").json(t)
			require.Equal(t, true, res["ok"], "%v", res)
			test := waitBrokerArrivals(t, p, n+1)[n]
			require.Equal(t, res["message_id"], test.ID())
			require.Contains(t, string(test.Body), `"type":"bothy.webhook.test"`)

			d := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","destination":`+p.bad+`}`).problem(t, http.StatusUnprocessableEntity)
			require.Contains(t, d, p.badField)
		})
	}
}

// waitBrokerArrivals waits until n messages arrived at p and returns them
// all.
func waitBrokerArrivals(t *testing.T, p *brokerPlace, n int) []outboundtest.Arrival {
	t.Helper()
	var got []outboundtest.Arrival
	testwait.Until(t, 20*time.Second, func() bool {
		got = p.arrivals(t)
		return len(got) >= n
	}, "%d messages on the broker", n)
	return got
}

// waitBrokerDelivered waits until the subscription at sp lists n
// deliveries as delivered, each after one attempt without a status code or
// an error.
func waitBrokerDelivered(t *testing.T, b *testBundle, owner, sp string, n int) {
	t.Helper()
	var page struct {
		Deliveries []struct {
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
}
