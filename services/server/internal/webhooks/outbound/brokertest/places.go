package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	gosync "sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// Kind is one destination kind as the engine's tests over every kind see
// it: a row of Kinds.
type Kind struct {
	Name string
	// DropsRepeats: the kind's broker drops a message sent again under
	// the same key (as its places' DropsRepeats).
	DropsRepeats bool
	// New makes a place of the test's own on the kind's broker (or
	// receiver), removed when the test ends.
	New func(t *testing.T) *Place
}

// Kinds are the destination kinds the machine runs, one row each: a test
// over every kind runs a subtest per row.
var Kinds = []Kind{
	{"HTTP", false, httpPlace},
	{"RabbitMQ", false, rabbitPlace},
	{"JetStream", true, natsPlace},
	{"RedisStream", true, redisPlace},
	{"MQTT", false, mqttPlace},
}

// Place is a place on a broker (an exchange with a queue, a stream, a
// key, a topic; or an HTTP receiver) that a subscription sends to, with
// the consumer that reads what arrives there.
type Place struct {
	// Addr is the broker's host:port, for a proxy in front of it.
	Addr string
	// Destination is the destination object, as the API takes it, that
	// sends to the place through addr (the broker's or a proxy's).
	Destination func(addr string) json.RawMessage
	// Refusing is a destination object that the broker keeps refusing (a
	// missing route or stream, a key of another type; for MQTT, which
	// refuses no publish, a broker that closes every connection; for HTTP
	// an address nothing listens on), and
	// RefusalReason is part of every such attempt's error.
	Refusing      json.RawMessage
	RefusalReason string
	// DropsRepeats: the broker drops a message sent again under the same
	// id; otherwise a repeat arrives again.
	DropsRepeats bool
	// Arrivals returns what arrived so far, in arrival order.
	Arrivals func(t *testing.T) []Arrival
}

// Arrival is one message the place's consumer read.
type Arrival struct {
	outboundtest.Arrival
	// At is when the consumer read it (zero where the place cannot say:
	// the kinds that drop repeats need no time).
	At time.Time
}

// Seq is the seq of the arrival's event (a message of one event).
func (a *Arrival) Seq() int64 {
	var env struct {
		Seq int64 `json:"seq"`
	}
	_ = json.Unmarshal(a.Body, &env)
	return env.Seq
}

// waitCtx bounds the consumers' calls to the brokers.
func waitCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// arrivals is what a push consumer recorded.
type arrivals struct {
	mu  gosync.Mutex
	got []Arrival
}

func (r *arrivals) add(h map[string]string, body []byte) {
	r.mu.Lock()
	r.got = append(r.got, Arrival{Arrival: outboundtest.Arrival{Headers: h, Body: body}, At: time.Now()})
	r.mu.Unlock()
}

func (r *arrivals) all(*testing.T) []Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Arrival(nil), r.got...)
}

// outage is the address of a proxy to the broker that closes every
// connection: a broker that keeps failing.
func outage(t *testing.T, addr string) string {
	p := NewProxy(t, addr)
	p.Cut()
	return p.Addr()
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	must(t, ln.Close())
	return addr
}

// httpPlace is a receiver recording every request and answering 204; its
// refusal is an address nothing listens on.
func httpPlace(t *testing.T) *Place {
	var got arrivals
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := map[string]string{}
		for k := range r.Header {
			h[k] = r.Header.Get(k)
		}
		got.add(h, body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	return &Place{
		Addr:          addr,
		Destination:   func(a string) json.RawMessage { return obj(`{"kind":"http","url":"http://%s/hook"}`, a) },
		Refusing:      obj(`{"kind":"http","url":"http://%s/hook"}`, closedPort(t)),
		RefusalReason: "connection refused",
		Arrivals:      got.all,
	}
}

// rabbitPlace is an exchange with a queue bound to every key and a
// consumer; its refusal is an exchange with no queue bound (the mandatory
// publish is returned).
func rabbitPlace(t *testing.T) *Place {
	raw := tooltest.Need(t, tooltest.RabbitMQ)
	u, err := url.Parse(raw)
	must(t, err)
	conn, err := amqp.Dial(raw)
	must(t, err)
	ch, err := conn.Channel()
	must(t, err)
	exchange, unroutable := Name("bothy-test-"), Name("bothy-test-noqueue-")
	must(t, ch.ExchangeDeclare(exchange, "topic", false, false, false, false, nil))
	must(t, ch.ExchangeDeclare(unroutable, "topic", false, false, false, false, nil))
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q.Name, "#", exchange, false, nil))
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	must(t, err)
	var got arrivals
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			h := map[string]string{}
			for k, v := range m.Headers {
				if s, ok := v.(string); ok {
					h[k] = s
				}
			}
			got.add(h, m.Body)
		}
	}()
	t.Cleanup(func() {
		_ = ch.ExchangeDelete(exchange, false, false)
		_ = ch.ExchangeDelete(unroutable, false, false)
		_ = conn.Close() // the exclusive queue goes with it
		<-done
	})
	dest := func(addr, exchange string) json.RawMessage {
		v := *u
		v.Host = addr
		return obj(`{"kind":"rabbitmq","url":%q,"exchange":%q}`, v.String(), exchange)
	}
	return &Place{
		Addr:          u.Host,
		Destination:   func(a string) json.RawMessage { return dest(a, exchange) },
		Refusing:      dest(u.Host, unroutable),
		RefusalReason: "NO_ROUTE",
		Arrivals:      got.all,
	}
}

// natsPlace is a stream of its own; its refusal is a subject no stream
// takes.
func natsPlace(t *testing.T) *Place {
	addr := NATS.Addr(t)
	nc, err := nats.Connect("nats://" + addr)
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	name, prefix := Name("BOTHYTEST_"), Name("bothytest")
	ctx, cancel := waitCtx()
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}})
	must(t, err)
	t.Cleanup(func() {
		ctx, cancel := waitCtx()
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return &Place{
		Addr: addr,
		Destination: func(a string) json.RawMessage {
			return obj(`{"kind":"jetstream","url":"nats://%s","subject":"%s.{space}.{type}","stream":%q}`, a, prefix, name)
		},
		Refusing:      obj(`{"kind":"jetstream","url":"nats://%s","subject":"%s.{type}"}`, addr, Name("bothytestnostream")),
		RefusalReason: "no stream takes subject",
		DropsRepeats:  true,
		Arrivals: func(t *testing.T) []Arrival {
			ctx, cancel := waitCtx()
			defer cancel()
			info, err := stream.Info(ctx)
			must(t, err)
			var out []Arrival
			for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
				m, err := stream.GetMsg(ctx, seq)
				must(t, err)
				h := map[string]string{}
				for k := range m.Header {
					h[k] = m.Header.Get(k)
				}
				out = append(out, Arrival{Arrival: outboundtest.Arrival{Headers: h, Body: m.Data}, At: m.Time})
			}
			return out
		},
	}
}

// redisPlace is a stream key of its own; its refusal is a key holding a
// string.
func redisPlace(t *testing.T) *Place {
	addr := Redis.Addr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	key, str := Name("bothytest:"), Name("bothytest:string:")
	ctx, cancel := waitCtx()
	defer cancel()
	must(t, client.Set(ctx, str, "not a stream", 0).Err())
	t.Cleanup(func() {
		ctx, cancel := waitCtx()
		defer cancel()
		_ = client.Del(ctx, key, str).Err()
		_ = client.Close()
	})
	dest := func(addr, key string) json.RawMessage {
		return obj(`{"kind":"redis","url":"redis://%s/0","key":%q}`, addr, key)
	}
	return &Place{
		Addr:          addr,
		Destination:   func(a string) json.RawMessage { return dest(a, key) },
		Refusing:      dest(addr, str),
		RefusalReason: "WRONGTYPE",
		DropsRepeats:  true,
		Arrivals: func(t *testing.T) []Arrival {
			ctx, cancel := waitCtx()
			defer cancel()
			es, err := client.XRange(ctx, key, "-", "+").Result()
			must(t, err)
			var out []Arrival
			for _, e := range es {
				a := Arrival{Arrival: outboundtest.Arrival{Headers: map[string]string{}}}
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

// mqttPlace is a topic prefix of its own with a subscriber at QoS 1; MQTT
// 3.1.1 refuses no publish, so its refusal is a broker that closes every
// connection.
func mqttPlace(t *testing.T) *Place {
	addr := MQTT.Addr(t)
	prefix := Name("bothytest")
	var got arrivals
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(Name("bothytest-sub-")).
		SetCleanSession(true).SetAutoReconnect(false))
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("brokertest: MQTT subscriber did not connect")
	}
	must(t, tok.Error())
	t.Cleanup(func() { c.Disconnect(250) })
	tok = c.Subscribe(prefix+"/#", 1, func(_ paho.Client, m paho.Message) {
		var p struct {
			Headers map[string]string `json:"headers"`
			Body    string            `json:"body"`
		}
		if json.Unmarshal(m.Payload(), &p) == nil {
			got.add(p.Headers, []byte(p.Body))
		}
	})
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("brokertest: MQTT subscription not acknowledged")
	}
	must(t, tok.Error())
	down := outage(t, addr)
	dest := func(a string) json.RawMessage {
		return obj(`{"kind":"mqtt","url":"mqtt://%s","topic":"%s/{space}/{type}"}`, a, prefix)
	}
	return &Place{
		Addr:          addr,
		Destination:   dest,
		Refusing:      dest(down),
		RefusalReason: "to " + down,
		Arrivals:      got.all,
	}
}

func obj(format string, args ...any) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(format, args...))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
}
