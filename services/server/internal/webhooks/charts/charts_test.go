package charts_test

import (
	"encoding/xml"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/charts"
)

func f(v float64) *float64 { return &v }

// view is three hours: one with both outcomes, one without attempts, one
// that only failed without any request.
func view() *webhooks.StatsView {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	h := time.Hour
	return &webhooks.StatsView{SubscriptionID: uuid.MustParse("0199c0de-0000-7000-8000-000000000001"), Since: t0, Until: t0.Add(3 * h),
		StepSeconds: 3600, OK: 9, Failed: 3, SuccessRate: f(0.75),
		Intervals: []webhooks.StatsInterval{
			{Start: t0, End: t0.Add(h), OK: 9, Failed: 1, LatencyP50Seconds: f(0.12), LatencyP95Seconds: f(0.9), SuccessRate: f(0.9)},
			{Start: t0.Add(h), End: t0.Add(2 * h)},
			{Start: t0.Add(2 * h), End: t0.Add(3 * h), Failed: 2, SuccessRate: f(0)},
		}}
}

// elements parses svg as XML and counts its elements by name and class.
func elements(t *testing.T, svg string) map[string]int {
	t.Helper()
	n := map[string]int{}
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		require.NoError(t, err, "not well-formed XML:\n%s", svg)
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
			for _, a := range se.Attr {
				if a.Name.Local == "class" {
					n[se.Name.Local+"."+a.Value]++
				}
			}
		}
	}
}

var (
	legendText = regexp.MustCompile(`<text class="legend"[^>]*>([^<]*)</text>`)
	legendY    = regexp.MustCompile(`<text class="legend"[^>]*y="([0-9.]+)"`)
)

// legend returns the labels of svg's legend, in order.
func legend(t *testing.T, svg string) []string {
	t.Helper()
	var out []string
	for _, m := range legendText.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestAttempts(t *testing.T) {
	t.Parallel()

	t.Run("DrawsStackedBarsLatencyAndRate", func(t *testing.T) {
		t.Parallel()
		svg := string(charts.Attempts(view(), nil))
		n := elements(t, svg)
		require.Equal(t, 1, n["svg"])
		require.Equal(t, 1, n["rect.ok"])
		require.Equal(t, 2, n["rect.failed"])
		// One interval with requests: its latencies are dots, as a line
		// needs two points.
		require.Equal(t, 1, n["circle.p50"])
		require.Equal(t, 1, n["circle.p95"])
		require.Zero(t, n["path"])
		require.Equal(t, 1, n["text.rate"])
		require.Equal(t, []string{"2xx", "failed", "p50 latency", "p95 latency"}, legend(t, svg))
		require.Contains(t, svg, "success rate 75%")
		require.Contains(t, svg, `role="img"`)
		require.Contains(t, svg, `aria-labelledby="stats-chart-title stats-chart-desc"`)
		require.Contains(t, svg, `<title id="stats-chart-title">Delivery attempts</title>`)
		require.Contains(t, svg, "in intervals of 1h: 9 answered 2xx, 3 failed, success rate 75%.")
		require.Contains(t, svg, "2026-12-01 08:00 UTC: 9 answered 2xx, 1 failed, 90%; latency p50 120 ms, p95 900 ms")
		require.NotContains(t, svg, "<script")
		require.NotContains(t, svg, "href")
	})

	t.Run("IsDeterministic", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, charts.Attempts(view(), nil), charts.Attempts(view(), nil))
	})

	t.Run("EscapesText", func(t *testing.T) {
		t.Parallel()
		svg := string(charts.Attempts(view(), &charts.Options{ID: `a"b`, Title: `<script>alert("x")</script> & co`}))
		elements(t, svg)
		require.NotContains(t, svg, "<script>")
		require.Contains(t, svg, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co")
		require.Contains(t, svg, `id="a&#34;b-title"`)
	})

	t.Run("EmptyWindowHasNoBarsNorLines", func(t *testing.T) {
		t.Parallel()
		v := view()
		for i := range v.Intervals {
			v.Intervals[i] = webhooks.StatsInterval{Start: v.Intervals[i].Start, End: v.Intervals[i].End}
		}
		v.OK, v.Failed, v.SuccessRate = 0, 0, nil
		svg := string(charts.Attempts(v, nil))
		n := elements(t, svg)
		require.Zero(t, n["rect.ok"]+n["rect.failed"])
		require.Zero(t, n["path"]+n["circle"])
		require.Contains(t, svg, "no attempts")
	})

	t.Run("ConsecutiveIntervalsMakeALineAndAGapBreaksIt", func(t *testing.T) {
		t.Parallel()
		v := view()
		v.Intervals = append(v.Intervals, v.Intervals[0], v.Intervals[0])
		v.Intervals[2].LatencyP50Seconds, v.Intervals[2].LatencyP95Seconds = f(0.2), f(0.4)
		svg := string(charts.Attempts(v, nil))
		// Intervals 0, 2, 3 and 4 have requests: a dot, then a line.
		n := elements(t, svg)
		require.Equal(t, 1, n["circle.p50"])
		require.Equal(t, 1, n["path.p50"])
		i := strings.Index(svg, `class="p50" d="`)
		require.Positive(t, i)
		d := svg[i+len(`class="p50" d="`):]
		d = d[:strings.IndexByte(d, '"')]
		require.Equal(t, 1, strings.Count(d, "M"), "d=%s", d)
		require.Equal(t, 2, strings.Count(d, "L"), "d=%s", d)
	})

	t.Run("LegendNamesOnlyWhatIsDrawn", func(t *testing.T) {
		t.Parallel()
		v := view()
		v.Intervals = v.Intervals[:1]
		v.Intervals[0].Failed, v.Intervals[0].LatencyP50Seconds, v.Intervals[0].LatencyP95Seconds = 0, nil, nil
		svg := string(charts.Attempts(v, nil))
		require.Equal(t, []string{"2xx"}, legend(t, svg))
		require.Zero(t, elements(t, svg)["rect.failed"])

		// A median of 0 ms is drawn (on the axis), and named.
		v.Intervals[0].LatencyP50Seconds, v.Intervals[0].LatencyP95Seconds = f(0), f(0.004)
		svg = string(charts.Attempts(v, nil))
		require.Equal(t, []string{"2xx", "p50 latency", "p95 latency"}, legend(t, svg))
		require.Equal(t, 1, elements(t, svg)["circle.p50"])

		v.Intervals[0].OK, v.Intervals[0].LatencyP50Seconds, v.Intervals[0].LatencyP95Seconds = 0, nil, nil
		require.Empty(t, legend(t, string(charts.Attempts(v, nil))), "nothing drawn, nothing named")
	})

	t.Run("NarrowWrapsTheLegendAndShortensTimes", func(t *testing.T) {
		t.Parallel()
		svg := string(charts.Attempts(view(), &charts.Options{Width: 340}))
		rows := map[string]bool{}
		for _, m := range legendY.FindAllStringSubmatch(svg, -1) {
			rows[m[1]] = true
		}
		require.Len(t, rows, 2, "the legend takes two rows:\n%s", svg)
		require.Contains(t, svg, ">Dec 1 08:00 UTC<")
		require.Contains(t, svg, ">Dec 1 11:00 UTC<")
		require.Contains(t, string(charts.Attempts(view(), nil)), ">2026-12-01 08:00 UTC<", "wide, the times are whole")
	})

	t.Run("TimesInTheGivenZone", func(t *testing.T) {
		t.Parallel()
		loc := time.FixedZone("CET", 3600)
		svg := string(charts.Attempts(view(), &charts.Options{Location: loc}))
		require.Contains(t, svg, "2026-12-01 09:00 CET")
	})
}
