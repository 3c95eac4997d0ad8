package consolebrowser

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// seqs are the seqs of the delivery rows the page shows, in order.
func seqs(b *Browser) []string {
	return Run(b, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('[data-testid="delivery-row"]'), r => r.dataset.seq)`))
}

// TestConsole_DeliveryPage opens a delivery from its subscription's page:
// the message (the event's data), each attempt with the request's headers,
// the custom header's value masked, and the receiver's answer as text.
func TestConsole_DeliveryPage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const secretValue = "Bearer receiver-secret-0123456789"
	require.Equal(t, http.StatusOK, f.api(t, http.MethodPatch, "/v1/webhooks/"+f.aliceSub, f.aliceToken,
		map[string]any{"headers": map[string]string{"Authorization": secretValue}}, nil))
	b := New(t)
	signIn(f, b, f.aliceToken)
	openSubscription(f, b, f.aliceSub)
	b.DocScreenshot("subscription", 1000, false)

	// The list keeps each delivery's attempts under it; the seq opens it.
	oldest := seqs(b)[1]
	b.Do(chromedp.Click(chromedp.CSS(`[data-testid="delivery-row"][data-seq="`+oldest+`"] [data-testid="delivery-link"]`)),
		shows("#message-body"))
	require.Equal(t, "Delivery "+oldest, heading(b))
	require.Equal(t, "delivered", text(b, "#delivery-status"))
	require.Equal(t, "item.created", text(b, "#delivery-event-type"))
	require.JSONEq(t, `{"n": 0}`, text(b, "#message-body"))

	require.Equal(t, 1, count(b, `[data-testid="attempt"]`))
	require.Equal(t, "HTTP 200", text(b, `[data-testid="attempt-status"]`))
	require.Equal(t, maliciousExcerpt, text(b, `[data-testid="response-excerpt"]`))
	b.Do(chromedp.Click(chromedp.CSS(`[data-testid="attempt-request"] summary`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="request-headers"]`)))
	headers := Run(b, chromedp.Evaluate[map[string]string](`Object.fromEntries(Array.from(
		document.querySelectorAll('[data-testid="request-header"]'), r => [r.dataset.name, r.querySelector("td").innerText]))`))
	require.Equal(t, text(b, "#delivery-event-id"), headers["Webhook-Id"])
	require.Contains(t, headers, "Authorization")
	require.Equal(t, webhooks.MaskedValue, headers["Authorization"], "the custom header's value is masked, none of it shown")
	require.NotContains(t, Run(b, chromedp.Evaluate[string](`document.documentElement.outerHTML`)), "receiver-secret")
	noScriptRan(t, b)
	b.Screenshot("delivery")
	b.DocScreenshot("delivery", 1000, false)

	// Another subscription's delivery is not reached through this one.
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+f.bobSub+"/deliveries/1"), shows("#error-detail"))
	require.Contains(t, heading(b), "404")
}

// TestConsole_DeliverySearchAndPaging finds deliveries by event ID, by
// time range and by event type, and pages them forward and back at a
// chosen page size; a filter the API refuses is shown by the filter,
// naming it.
func TestConsole_DeliverySearchAndPaging(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.appendEvents(t, f.aliceToken, "acme", 10)
	all := f.waitDelivered(t, f.aliceToken, f.aliceSub, 12)
	b := New(t)
	signIn(f, b, f.aliceToken)
	openSubscription(f, b, f.aliceSub)
	require.Len(t, seqs(b), 12, "20 a page by default")
	require.Zero(t, count(b, "#next-page, #prev-page"))

	// Ten a page: forward to the last two, and back.
	b.Do(setValue("limit", "10"), chromedp.Click(chromedp.ID("delivery-filter-submit")), shows("#next-page"))
	first := seqs(b)
	require.Len(t, first, 10)
	require.Zero(t, count(b, "#prev-page"))
	b.Do(chromedp.Click(chromedp.ID("next-page")), shows("#prev-page"))
	second := seqs(b)
	require.Len(t, second, 2)
	require.Zero(t, count(b, "#next-page"))
	last, _ := strconv.Atoi(first[9])
	next, _ := strconv.Atoi(second[0])
	require.Less(t, next, last, "the next page is older")
	b.Do(chromedp.Click(chromedp.ID("prev-page")), shows("#next-page"))
	require.Equal(t, first, seqs(b))

	// By event ID.
	var page struct {
		Deliveries []struct {
			Seq       int64  `json:"seq"`
			EventID   string `json:"event_id"`
			CreatedAt string `json:"created_at"`
		} `json:"deliveries"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/webhooks/"+f.aliceSub+"/deliveries?limit=100", f.aliceToken, nil, &page))
	require.Len(t, page.Deliveries, len(all))
	target := page.Deliveries[4]
	openSubscription(f, b, f.aliceSub)
	b.Do(chromedp.SendKeys(chromedp.ID("event-id"), target.EventID), chromedp.Click(chromedp.ID("delivery-filter-submit")),
		shows("#delivery-filter-clear"))
	require.Equal(t, []string{strconv.FormatInt(target.Seq, 10)}, seqs(b))
	b.Screenshot("search-event-id")

	// An event ID the API refuses: its problem, by the filter.
	openSubscription(f, b, f.aliceSub)
	b.Do(chromedp.SendKeys(chromedp.ID("event-id"), "not-an-id"), chromedp.Click(chromedp.ID("delivery-filter-submit")),
		shows("#filter-error"))
	require.Contains(t, text(b, "#filter-error"), "event_id")
	require.Zero(t, count(b, `[data-testid="delivery-row"]`))

	// By time range (UTC): around the deliveries' creation, then after it.
	created, err := time.Parse(time.RFC3339Nano, target.CreatedAt)
	require.NoError(t, err)
	local := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04") }
	openSubscription(f, b, f.aliceSub)
	b.Do(setValue("since", local(created.Add(-time.Hour))), setValue("until", local(created.Add(time.Hour))),
		chromedp.Click(chromedp.ID("delivery-filter-submit")), shows("#delivery-filter-clear"))
	require.Len(t, seqs(b), 12)
	b.Do(setValue("since", local(created.Add(time.Hour))), setValue("until", ""),
		chromedp.Click(chromedp.ID("delivery-filter-submit")), shows("#empty-deliveries"))
	require.Contains(t, text(b, "#empty-deliveries"), "match this filter")
	b.Do(setValue("since", local(created.Add(time.Hour))), setValue("until", local(created.Add(-time.Hour))),
		chromedp.Click(chromedp.ID("delivery-filter-submit")), shows("#filter-error"))
	require.Contains(t, text(b, "#filter-error"), "since")

	// By event type: one event of another type among the item.created ones.
	status := f.api(t, http.MethodPost, "/v1/spaces/acme/events", f.aliceToken,
		map[string]any{"events": []map[string]any{{"type": "order.shipped"}}}, nil)
	require.Equal(t, http.StatusCreated, status)
	newest := f.waitDelivered(t, f.aliceToken, f.aliceSub, 13)[0]
	openSubscription(f, b, f.aliceSub)
	b.Do(chromedp.SendKeys(chromedp.ID("event-type"), "order.*"), chromedp.Click(chromedp.ID("delivery-filter-submit")),
		shows("#delivery-filter-clear"))
	require.Equal(t, []string{strconv.FormatInt(newest.Seq, 10)}, seqs(b))
}

// TestConsole_HealthAtAGlance: the list shows each subscription's health:
// healthy while its receiver answers 2xx, failing once its newest attempt
// failed, disabled when disabled; with its last attempt and success rate.
func TestConsole_HealthAtAGlance(t *testing.T) {
	t.Parallel()
	f := setup(t)
	failingURL, _ := recvtest.Endpoint(t, webhookstest.Always(webhookstest.Answer{Status: http.StatusServiceUnavailable, Body: "down for maintenance"}))
	flakyURL, _ := recvtest.Endpoint(t, func(a *webhookstest.Arrival) webhookstest.Answer {
		if a.N%3 == 0 {
			return webhookstest.Answer{Status: http.StatusInternalServerError, Body: "try again"}
		}
		return webhookstest.Answer{}
	})
	var sub, flakySub struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusCreated, f.api(t, http.MethodPost, "/v1/webhooks", f.aliceToken,
		map[string]any{"space": "acme", "url": failingURL, "policy": "unordered"}, &sub))
	require.Equal(t, http.StatusCreated, f.api(t, http.MethodPost, "/v1/webhooks", f.aliceToken,
		map[string]any{"space": "acme", "url": flakyURL, "policy": "unordered"}, &flakySub))
	disabled := f.createSubscription(t, f.aliceToken, "acme")
	require.Equal(t, http.StatusOK, f.api(t, http.MethodPost, "/v1/webhooks/"+disabled+"/disable", f.aliceToken, map[string]any{}, nil))
	f.appendEvents(t, f.aliceToken, "acme", 8)
	f.waitDelivered(t, f.aliceToken, flakySub.ID, 8)
	require.Eventually(t, func() bool {
		for _, d := range f.deliveries(t, f.aliceToken, sub.ID) {
			if d.Attempts > 0 {
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "the failing receiver is tried")

	b := New(t)
	signIn(f, b, f.aliceToken)
	badge := func(id string) string {
		return text(b, fmt.Sprintf(`[data-testid="subscription-row"][data-id=%q] [data-testid="health-badge"]`, id))
	}
	cell := func(id, testid string) string {
		return text(b, fmt.Sprintf(`[data-testid="subscription-row"][data-id=%q] [data-testid=%q]`, id, testid))
	}
	require.Equal(t, "healthy", badge(f.aliceSub))
	require.Contains(t, cell(f.aliceSub, "last-attempt"), "HTTP 200")
	require.Equal(t, "failing", badge(sub.ID))
	require.Contains(t, cell(sub.ID, "last-attempt"), "HTTP 503")
	require.Equal(t, "disabled", badge(disabled))
	require.Contains(t, cell(disabled, "last-attempt"), "none yet")
	// Only the badge says how deliveries go: an active subscription's
	// status has no colour of its own, so a failing badge never stands
	// beside a green "active".
	color := func(id, testid string) string {
		return Run(b, chromedp.Evaluate[string](fmt.Sprintf(
			`getComputedStyle(document.querySelector('[data-testid="subscription-row"][data-id=%q] [data-testid=%q]')).color`, id, testid)))
	}
	require.Equal(t, "active", cell(sub.ID, "subscription-status"))
	require.Equal(t, color(sub.ID, "subscription-policy"), color(sub.ID, "subscription-status"), "the failing row's status is plain text")
	require.NotEqual(t, color(f.aliceSub, "health-badge"), color(sub.ID, "subscription-status"), "not the healthy badge's green")
	// Success rates of the last 24 hours, from the API's statistics.
	require.Equal(t, "100.0%", cell(f.aliceSub, "success-rate"))
	require.Equal(t, "0.0%", cell(sub.ID, "success-rate"))
	require.Equal(t, "–", cell(disabled, "success-rate"))
	b.Screenshot("subscriptions-health")
	b.DocScreenshot("subscriptions", 1000, false)

	// A subscription's page charts its last 24 hours: an SVG drawn on
	// the server, with its totals as text.
	var st struct {
		OK     int64 `json:"ok"`
		Failed int64 `json:"failed"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/webhooks/"+flakySub.ID+"/stats", f.aliceToken, nil, &st))
	require.Positive(t, st.Failed)
	openSubscription(f, b, flakySub.ID)
	// Drawn wide and narrow; at this width the wide one is shown.
	require.Equal(t, 1, count(b, `#chart-attempts .chart-wide svg[role="img"]`))
	require.Equal(t, 1, count(b, `#chart-attempts .chart-narrow svg[role="img"]`))
	require.Equal(t, 1, Run(b, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('#chart-attempts svg'))
		.filter(s => s.getBoundingClientRect().width > 0).length`)), "one chart is shown")
	require.Contains(t, text(b, `[data-testid="chart-summary"]`), fmt.Sprintf("%d answered 2xx, %d failed", st.OK, st.Failed))
	require.Positive(t, count(b, `#chart-attempts svg rect`), "bars are drawn")
	require.Zero(t, count(b, `#chart-attempts script`))
	b.Screenshot("subscription-charts")
	b.DocScreenshot("subscription-charts", 1000, false)
}
