package console

import (
	"net/http"
	"net/url"
	"strconv"
)

// health is a subscription's state at a glance in the list: a badge
// (healthy, failing or disabled), its last attempt and its success rate
// over the last 24 hours.
type health struct {
	// Badge is "healthy", "failing" or "disabled"; Meaning says it in a
	// sentence (the badge's title).
	Badge, Meaning string
	// Last is the newest recorded attempt, nil before the first.
	Last *attemptView
	// SuccessRate is the share of the last 24 hours' attempts answered
	// 2xx, nil without attempts or statistics.
	SuccessRate *float64
}

// healthConcurrency bounds the API calls one list page makes at once for
// its rows' health, so a page takes a few of the pool's connections, not
// one per row.
const healthConcurrency = 4

// healthProbe is how many of the newest deliveries are read for the last
// attempt: the newest ones may still wait for their first.
const healthProbe = 3

// healthOf reads sub's health from the API: its newest deliveries with
// their attempts and its statistics. A subscription is failing while it
// probes a receiver that failed (the ordered policy), when the newest
// attempt of its newest deliveries failed, or when most attempts of its
// newest hour with attempts failed; disabled when it is not active.
func (c *Console) healthOf(r *http.Request, s *session, sub *subscriptionView) (*health, error) {
	h := &health{Badge: "healthy"}
	var pg deliveriesPage
	if err := c.call(r, s, http.MethodGet, "/v1/webhooks/"+url.PathEscape(sub.ID)+"/deliveries?limit="+strconv.Itoa(healthProbe), nil, &pg); err != nil {
		return nil, err
	}
	for _, d := range pg.Deliveries {
		if n := len(d.AttemptList); n > 0 {
			h.Last = &d.AttemptList[n-1]
			break
		}
	}
	st, err := c.stats(r, s, sub.ID)
	if err != nil {
		return nil, err
	}
	recentlyFailing := false
	if st != nil {
		h.SuccessRate = st.SuccessRate
		recentlyFailing = mostlyFailed(st)
	}
	switch {
	case sub.Status != "active":
		h.Badge, h.Meaning = "disabled", "Not sending: the subscription is disabled."
	case sub.Probing || (h.Last != nil && !h.Last.ok()) || recentlyFailing:
		h.Badge, h.Meaning = "failing", "Sending, but the receiver's recent answers failed; failed deliveries are retried."
	default:
		h.Meaning = "Sending, and the receiver answers."
	}
	return h, nil
}

// mostlyFailed says whether most attempts of the newest interval that had
// any failed: an ordered subscription retrying its head has its newer
// deliveries waiting without attempts, so its newest attempts are not
// among those of its newest deliveries.
func mostlyFailed(st *statsView) bool {
	for i := len(st.Intervals) - 1; i >= 0; i-- {
		if it := st.Intervals[i]; it.OK+it.Failed > 0 {
			return it.Failed > it.OK
		}
	}
	return false
}

// ok says whether the receiver answered the attempt 2xx.
func (a *attemptView) ok() bool {
	return a.StatusCode != nil && *a.StatusCode >= 200 && *a.StatusCode < 300 && a.Error == ""
}
