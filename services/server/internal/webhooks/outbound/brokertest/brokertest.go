package brokertest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// The brokers this machine runs (.ci/brokers installs and starts them).
var (
	NATS  = Broker{tool: tooltest.NATS}
	Redis = Broker{tool: tooltest.Redis}
	MQTT  = Broker{tool: tooltest.MQTT}
)

// Broker is a broker the tests use.
type Broker struct {
	tool *tooltest.Tool
}

// Addr returns the broker's host:port (its tooltest variable names
// another URL). Without a broker there, it fails tb under CI and skips it
// elsewhere (tooltest.Need).
func (b Broker) Addr(tb testing.TB) string {
	tb.Helper()
	raw := tooltest.Need(tb, b.tool)
	u, err := url.Parse(raw)
	if err != nil {
		tb.Fatalf("brokertest: %s: %v", b.tool.Name, err)
	}
	return u.Host
}

// Policy is the egress policy of tests: the brokers are on loopback.
var Policy = egress.Policy{AllowPrivate: true}

// Log is a logger for pools under test that writes nothing.
var Log = slog.New(slog.NewTextHandler(io.Discard, nil))

// Name is a name unique to this test run, for streams, keys and topics:
// letters and digits after prefix.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Target is a target with a fresh signing secret and a custom header.
func Target() *outbound.Target {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return &outbound.Target{Secret: "whsec_" + base64.StdEncoding.EncodeToString(b[:]),
		Headers: map[string]string{"X-Tenant": "acme"}}
}

// Messages returns n messages of one event each, seqs first, first+1, …
// in space and of type, with bodies their events' envelopes.
func Messages(tb testing.TB, space, typ string, first int64, n int) []*outbound.Message {
	tb.Helper()
	out := make([]*outbound.Message, n)
	for i := range out {
		ev := &sync.Event{Seq: first + int64(i), ID: uuid.New(), Space: space, Type: typ, Actor: "test",
			OccurredAt: time.Now(), Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"note":"<&>"}`, i))}
		m, err := outbound.SingleMessage(ev)
		if err != nil {
			tb.Fatalf("brokertest: %v", err)
		}
		out[i] = &m
	}
	return out
}

// Verify checks body against the Standard Webhooks headers as a consumer
// would, with t's secret.
func Verify(t *outbound.Target, header map[string]string, body []byte) error {
	wh, err := standardwebhooks.NewWebhook(t.Secret)
	if err != nil {
		return err
	}
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	return wh.Verify(body, h)
}
