package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	statscharts "github.com/bothy/bothy/services/server/internal/webhooks/charts"
)

// statsView is GET /v1/webhooks/{id}/stats: a subscription's attempts
// over a window, by interval.
type statsView = webhooks.StatsView

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

// chart is the chart of a subscription's page: an inline SVG drawn on the
// server from the statistics (package charts: every text in it escaped,
// no script), with the window's totals as text. It is drawn twice, wide
// and narrow; the style sheet shows the one that fits the screen, so that
// scaled to fit, its text keeps about its size.
type chart struct {
	ID      string
	Title   string
	Summary string
	SVG     template.HTML
	// NarrowSVG is the drawing for a phone's width.
	NarrowSVG template.HTML
}

// narrowChartWidth is the narrow drawing's width: a 375-pixel screen's
// width less the page's and the figure's margins.
const narrowChartWidth = 340

// charts are the subscription page's charts of st: attempts per interval
// (2xx and failed), their latency (p50 and p95) and the success rate.
func charts(st *statsView) []chart {
	if st == nil {
		return nil
	}
	const id, title = "chart-attempts", "Delivery attempts, last 24 hours"
	rate := "no attempts"
	if st.SuccessRate != nil {
		rate = fmt.Sprintf("success rate %.1f%%", *st.SuccessRate*100)
	}
	return []chart{{ID: id, Title: title, Summary: fmt.Sprintf("%d answered 2xx, %d failed, %s", st.OK, st.Failed, rate),
		SVG:       statscharts.Attempts(st, &statscharts.Options{ID: id + "-svg", Title: title}),
		NarrowSVG: statscharts.Attempts(st, &statscharts.Options{ID: id + "-narrow-svg", Title: title, Width: narrowChartWidth, Height: 260}),
	}}
}
