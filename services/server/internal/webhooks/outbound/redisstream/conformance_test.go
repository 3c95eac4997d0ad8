package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/redisstream"
)

func TestRedisStream_Conformance(t *testing.T) {
	t.Parallel()
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr:   brokertest.Redis.Addr(t),
		DropsRepeats: true,
		Setup: func(t *testing.T, through string, target *outbound.Target) *outboundtest.Place {
			b := setup(t)
			pool := redisstream.NewPool(brokertest.Policy, brokertest.Log)
			if brokertest.WithoutConfirms() {
				pool.SkipConfirms()
			}
			t.Cleanup(pool.Close)
			dest := func(key string) outbound.Destination {
				c, err := redisstream.ParseConfig(json.RawMessage(fmt.Sprintf(`{"url":"redis://%s","key":%q}`, through, key)))
				require.NoError(t, err)
				return pool.Destination(c, target)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			notAStream := b.prefix + ":string"
			require.NoError(t, b.client.Set(ctx, notAStream, "not a stream", 0).Err())
			key := b.key("conformance")
			return &outboundtest.Place{
				Dest:          dest(b.prefix + ":{space}"),
				Refusing:      dest(notAStream),
				RefusalReason: "WRONGTYPE",
				Received: func() []outboundtest.Arrival {
					var out []outboundtest.Arrival
					for _, e := range b.entries(t, key) {
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
		},
	})
}

// TestRedisStream_ConformanceFailsWithoutConfirms runs the conformance
// suite in a child process whose pool does not wait for Redis' answer, and
// wants it to fail where a send is answered before Redis confirmed: the
// cut test (a send answered while its command, or the connection's
// handshake, is held back) and the refusal (WRONGTYPE answered delivered).
func TestRedisStream_ConformanceFailsWithoutConfirms(t *testing.T) {
	t.Parallel()
	brokertest.Redis.Addr(t)
	brokertest.RequireFailsWithoutConfirms(t, "TestRedisStream_Conformance",
		"--- FAIL: TestRedisStream_Conformance/DeliveredOnlyAfterConfirmationAndRetryOnCut",
		"--- FAIL: TestRedisStream_Conformance/RefusalIsRetryWithReason")
}
