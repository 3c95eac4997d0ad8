package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

// statsView is GET /v1/webhooks/{id}/stats: a subscription's attempts
// over a window, by interval.
type statsView struct {
	Since       time.Time       `json:"since"`
	Until       time.Time       `json:"until"`
	StepSeconds int64           `json:"step_seconds"`
	OK          int64           `json:"ok"`
	Failed      int64           `json:"failed"`
	SuccessRate *float64        `json:"success_rate"`
	Intervals   []statsInterval `json:"intervals"`
}

type statsInterval struct {
	Start             time.Time `json:"start"`
	End               time.Time `json:"end"`
	OK                int64     `json:"ok"`
	Failed            int64     `json:"failed"`
	LatencyP50Seconds *float64  `json:"latency_p50_seconds"`
	LatencyP95Seconds *float64  `json:"latency_p95_seconds"`
	SuccessRate       *float64  `json:"success_rate"`
}

// stats reads the last 24 hours of a subscription's attempts from the
// API; nil when the API has no statistics to give (404).
func (c *Console) stats(r *http.Request, s *session, id string) (*statsView, error) {
	var v statsView
	err := c.call(r, s, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id)+"/stats", nil, &v)
	if pe := (*pageError)(nil); errors.As(err, &pe) && pe.status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// chart is one chart of a subscription's page: an inline SVG rendered on
// the server from the statistics, with a text summary for screen readers
// and the tests.
type chart struct {
	ID      string
	Title   string
	Summary string
	SVG     template.HTML
}

// charts are the subscription page's charts of st: deliveries per
// interval (ok and failed), attempt latency (p50 and p95) and success
// rate.
func charts(st *statsView) []chart {
	if st == nil {
		return nil
	}
	rate := "no attempts"
	if st.SuccessRate != nil {
		rate = fmt.Sprintf("%.1f%%", *st.SuccessRate*100)
	}
	return []chart{
		{ID: "chart-deliveries", Title: "Attempts per hour", Summary: fmt.Sprintf("%d ok, %d failed", st.OK, st.Failed)},
		{ID: "chart-latency", Title: "Latency p50 / p95", Summary: ""},
		{ID: "chart-success", Title: "Success rate", Summary: rate},
	}
}
