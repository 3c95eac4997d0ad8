package httpdest_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/httpdest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// received is what endpoint ep of the webhook test kit got, as the
// conformance suite reads arrivals.
func received(ep *webhookstest.Endpoint) func() []outboundtest.Arrival {
	return func() []outboundtest.Arrival {
		var out []outboundtest.Arrival
		for _, a := range ep.Arrivals() {
			h := map[string]string{}
			for k := range a.Header {
				h[k] = a.Header.Get(k)
			}
			out = append(out, outboundtest.Arrival{Headers: h, Body: a.Body})
		}
		return out
	}
}

func TestHTTP_Conformance(t *testing.T) {
	rec := recvtest.Start(t, nil)
	rec.SetDefaultRule(webhookstest.Status(http.StatusNotFound)) // the paths no subtest serves
	subtests := 0
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr: strings.TrimPrefix(rec.Base(), "http://"),
		Setup: func(t *testing.T, addr string, target *outbound.Target) *outboundtest.Place {
			subtests++ // subtests run one after another, each at an endpoint of its own
			name := fmt.Sprintf("hook%d", subtests)
			ep := rec.Endpoint(name)
			ep.SetRule(nil)
			pool := httpdest.NewPool(outbound.NewHTTPClient(10*time.Second, true), 64<<10)
			t.Cleanup(pool.Close)
			good, refusing := *target, *target
			good.URL, refusing.URL = "http://"+addr+webhookstest.Path(name), "http://"+addr+"/missing"
			return &outboundtest.Place{Dest: pool.Destination(&good), Refusing: pool.Destination(&refusing),
				RefusalReason: "404 Not Found", Received: received(ep)}
		},
	})
}
