package consolebrowser

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// maliciousExcerpt is what the receiver answers: markup that runs script
// wherever a page inserts it as HTML instead of text.
const maliciousExcerpt = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// consoleKey signs the portal links of the tests' servers.
const consoleKey = "console-key-for-browser-tests-0123456789"

// fixture is a running server (role all, so deliveries happen) on a
// scratch database, with two tenants:
//
//   - alice has write on space acme and one subscription there, with two
//     delivered events whose receiver answered maliciousExcerpt;
//   - bob has write on space globex and one subscription there, which
//     alice must never reach.
type fixture struct {
	db       *dbtest.DB
	base     string // the server, http://127.0.0.1:PORT
	receiver *receiver

	aliceToken, bobToken string
	aliceSub, bobSub     string // subscription ids
}

// setup starts the fixture for t.
func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{db: dbtest.NewDB(t), receiver: newReceiver(t)}
	f.base = startServer(t, f.db.URL)
	f.aliceToken = f.principal(t, "alice", authz.RightWrite, "acme")
	f.bobToken = f.principal(t, "bob", authz.RightWrite, "globex")
	f.aliceSub = f.createSubscription(t, f.aliceToken, "acme")
	f.bobSub = f.createSubscription(t, f.bobToken, "globex")
	f.appendEvents(t, f.aliceToken, "acme", 2)
	f.waitDelivered(t, f.aliceToken, f.aliceSub, 2)
	return f
}

// startServer runs the server as "bothy server" builds it until the test
// ends and returns its base URL.
func startServer(t *testing.T, url string) string {
	t.Helper()
	return startServerAs(t, url, "all")
}

// startServerAs is startServer in the given role; with role api the server
// answers the API and serves the console but runs no consumer rounds and
// no deliveries.
func startServerAs(t *testing.T, url, role string) string {
	t.Helper()
	flags := apptest.Flags(url, role)
	flags["database.max_conns"] = "6" // the test server is shared; the default is 20
	flags["console.enabled"] = "true"
	flags["console.key"] = consoleKey
	return apptest.Start(t, flags)
}

// principal creates a principal with right on space and returns a bearer
// token with every scope.
func (f *fixture) principal(t *testing.T, id string, right authz.Right, space string) string {
	t.Helper()
	return apptest.Principal(t, f.db.Pool, id, right, space, apptest.AllScopes)
}

// api sends a JSON request to the HTTP API and decodes a JSON answer into
// out (if not nil); it returns the status.
func (f *fixture) api(t *testing.T, method, path, token string, body, out any) int {
	t.Helper()
	return apptest.CallAPI(t, f.base, method, path, token, body, out)
}

func (f *fixture) createSubscription(t *testing.T, token, space string) string {
	t.Helper()
	var sub struct {
		ID string `json:"id"`
	}
	status := f.api(t, http.MethodPost, "/v1/webhooks", token, map[string]any{"space": space, "url": f.receiver.srv.Base() + "/" + space}, &sub)
	require.Equal(t, http.StatusCreated, status)
	return sub.ID
}

func (f *fixture) appendEvents(t *testing.T, token, space string, n int) {
	t.Helper()
	events := make([]map[string]any, n)
	for i := range events {
		events[i] = map[string]any{"type": "item.created", "data": map[string]any{"n": i}}
	}
	status := f.api(t, http.MethodPost, "/v1/spaces/"+space+"/events", token, map[string]any{"events": events}, nil)
	require.Equal(t, http.StatusCreated, status)
}

// subscription is the API's view of a subscription, as far as the tests
// check it; status is 404 when it is gone.
type subscription struct {
	Status string `json:"status"`
}

func (f *fixture) subscription(t *testing.T, token, id string) (*subscription, int) {
	t.Helper()
	var sub subscription
	status := f.api(t, http.MethodGet, "/v1/webhooks/"+id, token, nil, &sub)
	return &sub, status
}

type delivery struct {
	Seq      int64  `json:"seq"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts"`
}

func (f *fixture) deliveries(t *testing.T, token, id string) []delivery {
	t.Helper()
	var page struct {
		Deliveries []delivery `json:"deliveries"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/webhooks/"+id+"/deliveries", token, nil, &page))
	return page.Deliveries
}

// waitDelivered polls until n deliveries of subscription id are delivered.
func (f *fixture) waitDelivered(t *testing.T, token, id string, n int) []delivery {
	t.Helper()
	var got []delivery
	require.Eventually(t, func() bool {
		got = got[:0]
		for _, d := range f.deliveries(t, token, id) {
			if d.Status == "delivered" {
				got = append(got, d)
			}
		}
		return len(got) >= n
	}, 60*time.Second, 50*time.Millisecond, "waiting for %d delivered deliveries", n)
	return got
}

// receiver answers every webhook request 200 with maliciousExcerpt as an
// HTML body; every path is an endpoint of the webhook test kit.
type receiver struct {
	srv *webhookstest.Server
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	srv := recvtest.Start(t, nil)
	srv.SetDefaultRule(webhookstest.Always(webhookstest.Answer{Body: maliciousExcerpt, Header: map[string]string{"Content-Type": "text/html"}}))
	return &receiver{srv: srv}
}

// requests is how many requests came for path.
func (rv *receiver) requests(path string) int {
	return rv.srv.Endpoint(strings.TrimPrefix(path, "/")).Count()
}
