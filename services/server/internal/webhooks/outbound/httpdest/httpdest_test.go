package httpdest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	gosync "sync"
	"testing"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/httpdest"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/outboundtest"
)

// receiver records the requests to /hook and answers 404 elsewhere.
type receiver struct {
	mu  gosync.Mutex
	got []outboundtest.Arrival
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if req.URL.Path != "/hook" {
		http.NotFound(w, req)
		return
	}
	h := map[string]string{}
	for k := range req.Header {
		h[k] = req.Header.Get(k)
	}
	r.mu.Lock()
	r.got = append(r.got, outboundtest.Arrival{Headers: h, Body: body})
	r.mu.Unlock()
}

func (r *receiver) received() []outboundtest.Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outboundtest.Arrival(nil), r.got...)
}

func TestHTTP_Conformance(t *testing.T) {
	rec := &receiver{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	outboundtest.Run(t, &outboundtest.Kit{
		BrokerAddr: srv.Listener.Addr().String(),
		Setup: func(t *testing.T, addr string, target *outbound.Target) *outboundtest.Place {
			rec.mu.Lock()
			rec.got = nil // subtests run one after another
			rec.mu.Unlock()
			pool := httpdest.NewPool(outbound.NewHTTPClient(10*time.Second, true), 64<<10)
			t.Cleanup(pool.Close)
			good, refusing := *target, *target
			good.URL, refusing.URL = "http://"+addr+"/hook", "http://"+addr+"/missing"
			return &outboundtest.Place{Dest: pool.Destination(&good), Refusing: pool.Destination(&refusing),
				RefusalReason: "404 Not Found", Received: rec.received}
		},
	})
}
