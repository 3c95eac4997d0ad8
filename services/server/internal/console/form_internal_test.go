package console

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFieldOf: the form shows an API problem next to the field its detail
// names first, as the webhooks package and the API spell them.
func TestFieldOf(t *testing.T) {
	t.Parallel()
	for detail, want := range map[string]string{
		"invalid webhook subscription: max_batch: 5000, want 1..1000 (0: one event per request)":                   "max_batch",
		"invalid webhook subscription: max_in_flight: only with policy unordered (this one is ordered)":            "max_in_flight",
		"invalid webhook subscription: headers.X-Forwarded-For: this header cannot be set: hop":                    "headers",
		"webhook target refused: url: scheme ftp, want http or https":                                              "url",
		"invalid webhook subscription: event_types: filter \"Bad Type\": want item.created":                        "event_types",
		"invalid webhook subscription: retry_base_seconds: 5 is above retry_max_seconds 2":                         "retry_base_seconds",
		"invalid webhook subscription: destination.exchange: required (the default exchange routes by queue name)": "destination.exchange",
		"webhook target refused: destination.url: 10.0.0.1 is a private address":                                   "destination.url",
		"invalid webhook subscription: destination.kind: \"kafka\", want one of http, jetstream":                   "destination.kind",
		"invalid webhook subscription: destination: unknown field \"q\"":                                           "destination",
		"space and url are required":                                    "",
		`not allowed: principal "alice" has no right on space "globex"`: "",
	} {
		require.Equal(t, want, fieldOf(detail), detail)
	}
}

// TestPager: "Previous page" returns to the cursor the page came from,
// the first page has none, and the filter and page size stay in every
// link.
func TestPager(t *testing.T) {
	t.Parallel()
	first := readPager(httptest.NewRequest("GET", "/console/subscriptions/x?limit=10&status=dead", nil))
	first.base = deliveryFilter{Status: "dead"}.query()
	first.Next = "c1"
	require.Empty(t, first.PrevURL())
	require.Equal(t, "/console/subscriptions/x?back=&cursor=c1&limit=10&status=dead", first.NextURL())

	second := readPager(httptest.NewRequest("GET", first.NextURL(), nil))
	second.base, second.Next = first.base, "c2"
	require.Equal(t, "c1", second.Cursor)
	require.Equal(t, "/console/subscriptions/x?limit=10&status=dead", second.PrevURL())
	third := readPager(httptest.NewRequest("GET", second.NextURL(), nil))
	third.base = first.base
	require.Equal(t, "/console/subscriptions/x?back=&cursor=c1&limit=10&status=dead", third.PrevURL())
	require.Equal(t, "/console/subscriptions/x?limit=10&status=dead", third.FirstURL())

	// A page size not offered is the default.
	require.Equal(t, pageSizes[0], readPager(httptest.NewRequest("GET", "/console/subscriptions?limit=7", nil)).Limit)
}
