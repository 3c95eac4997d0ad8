// Package charts draws a subscription's delivery statistics
// (webhooks.StatsView) as an SVG image on the server, so the console shows
// them without JavaScript and without fetching anything. The drawing is
// plain markup: one bar per interval, its attempts answered 2xx stacked
// under the failed ones, a line for the median and one for the 95th
// percentile latency on a second scale (a dot where an interval with
// requests has no neighbour with requests), and the window's success rate
// as text. The legend names only what is drawn, and wraps onto more rows
// in a narrow drawing, which also writes shorter times. It is accessible
// (role img, a title and a description that say in words what the bars
// show, a title on each bar for its numbers) and deterministic: the same
// view and options give the same bytes.
package charts

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// Options shape a chart; zero fields take their defaults.
type Options struct {
	// ID prefixes the ids of the chart's title and description, which
	// must be unique in the page that embeds it. Default "stats-chart".
	ID string
	// Title is the chart's title. Default "Delivery attempts".
	Title string
	// Width and Height are the image's size in CSS pixels. Default 720
	// and 240. A page that scales the image to fit should draw it at about
	// the size it is shown (a narrow one for a phone), so that its text
	// keeps its size.
	Width, Height int
	// Location is the time zone of the time labels. Default UTC.
	Location *time.Location
}

// Colors of the chart's parts; each part also carries a class, so a page
// may restyle them.
const (
	colorOK     = "#2e7d32"
	colorFailed = "#c62828"
	colorP50    = "#1565c0"
	colorP95    = "#6a1b9a"
	colorAxis   = "#757575"
	colorText   = "#212121"
)

// Margins of the plot inside the image: room for the scales' labels left
// and right, the legend's first row above (each further row adds
// legendRow) and the time labels below.
const (
	marginLeft   = 48
	marginRight  = 56
	marginTop    = 28
	marginBottom = 24
	legendRow    = 18
)

// charWidth is a generous width of one character of the chart's 11 px
// sans-serif text, to lay out text that must not overlap.
const charWidth = 7

// Attempts returns v as an SVG image, ready to embed in an HTML page or to
// serve as image/svg+xml: every text in it is escaped.
func Attempts(v *webhooks.StatsView, o *Options) template.HTML {
	var opts Options
	if o != nil {
		opts = *o
	}
	opts.ID = cmp.Or(opts.ID, "stats-chart")
	opts.Title = cmp.Or(opts.Title, "Delivery attempts")
	opts.Width = max(cmp.Or(opts.Width, 720), marginLeft+marginRight+40)
	opts.Height = max(cmp.Or(opts.Height, 240), marginTop+marginBottom+40)
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	c := &chart{v: v, o: &opts}
	c.layoutLegend()
	return template.HTML(c.draw()) //nolint:gosec // every text is escaped by esc
}

type chart struct {
	v *webhooks.StatsView
	o *Options
	b strings.Builder
	// legend is what the legend names, placed; top is the plot's top
	// edge, below the legend's rows.
	legend []legendItem
	top    float64
}

// legendItem is one entry of the legend at x in row (from 0).
type legendItem struct {
	class, color, label string
	x                   float64
	row                 int
}

func (c *chart) printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *chart) draw() string {
	o := c.o
	titleID, descID := o.ID+"-title", o.ID+"-desc"
	c.printf(`<svg xmlns="http://www.w3.org/2000/svg" class="stats-chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="%s %s" font-family="sans-serif" font-size="11">`+"\n",
		o.Width, o.Height, o.Width, o.Height, esc(titleID), esc(descID))
	c.printf(`<title id="%s">%s</title>`+"\n", esc(titleID), esc(o.Title))
	c.printf(`<desc id="%s">%s</desc>`+"\n", esc(descID), esc(c.describe()))
	c.drawLegend()
	c.frame()
	c.bars()
	c.latency()
	c.printf("</svg>\n")
	return c.b.String()
}

// plot is the area of the bars.
func (c *chart) plot() (x0, y0, w, h float64) {
	return marginLeft, c.top, float64(c.o.Width - marginLeft - marginRight), math.Max(float64(c.o.Height)-c.top-marginBottom, 20)
}

// describe says in words what the chart shows, for screen readers.
func (c *chart) describe() string {
	v := c.v
	var s strings.Builder
	fmt.Fprintf(&s, "Attempts from %s to %s in intervals of %s: %d answered 2xx, %d failed",
		c.when(v.Since), c.when(v.Until), step(v.StepSeconds), v.OK, v.Failed)
	if v.SuccessRate != nil {
		fmt.Fprintf(&s, ", success rate %s", percent(*v.SuccessRate))
	}
	s.WriteString(".")
	if median, high := c.maxLatency(p50), c.maxLatency(p95); high > 0 {
		fmt.Fprintf(&s, " Highest median latency %s, highest 95th percentile %s.", secs(median), secs(high))
	}
	if worst := c.worst(); worst != nil {
		fmt.Fprintf(&s, " Most failures: %d in the interval from %s.", worst.Failed, c.when(worst.Start))
	}
	return s.String()
}

// worst is the interval with the most failed attempts (the first of
// equals), nil if none failed.
func (c *chart) worst() *webhooks.StatsInterval {
	var w *webhooks.StatsInterval
	for i := range c.v.Intervals {
		if it := &c.v.Intervals[i]; it.Failed > 0 && (w == nil || it.Failed > w.Failed) {
			w = it
		}
	}
	return w
}

// layoutLegend places the legend's entries, each of a part the chart
// draws: left to right after the plot's left edge, onto a new row where
// the next would run into the success rate (first row) or past the plot's
// right edge.
func (c *chart) layoutLegend() {
	right := float64(c.o.Width-marginRight) - textWidth(c.rateText()) - 12
	x, row := float64(marginLeft), 0
	for _, e := range []struct {
		class, color, label string
		drawn               bool
	}{
		{"ok", colorOK, "2xx", c.drawsBars(func(i *webhooks.StatsInterval) int64 { return i.OK })},
		{"failed", colorFailed, "failed", c.drawsBars(func(i *webhooks.StatsInterval) int64 { return i.Failed })},
		{"p50", colorP50, "p50 latency", c.drawsLatency(p50)},
		{"p95", colorP95, "p95 latency", c.drawsLatency(p95)},
	} {
		if !e.drawn {
			continue
		}
		w := 14 + textWidth(e.label)
		if x > marginLeft && x+w > right {
			x, row, right = marginLeft, row+1, float64(c.o.Width-marginRight)
		}
		c.legend = append(c.legend, legendItem{class: e.class, color: e.color, label: e.label, x: x, row: row})
		x += w + 16
	}
	rows := 1
	if n := len(c.legend); n > 0 {
		rows = c.legend[n-1].row + 1
	}
	c.top = float64(marginTop + (rows-1)*legendRow)
}

// drawsBars says whether some interval has a bar part of n attempts.
func (c *chart) drawsBars(n func(*webhooks.StatsInterval) int64) bool {
	for i := range c.v.Intervals {
		if n(&c.v.Intervals[i]) > 0 {
			return true
		}
	}
	return false
}

// drawsLatency says whether latency draws a line or a dot of of: some
// interval has a value, and the scale is not zero.
func (c *chart) drawsLatency(of func(*webhooks.StatsInterval) *float64) bool {
	if c.latencyScale() == 0 {
		return false
	}
	for i := range c.v.Intervals {
		if of(&c.v.Intervals[i]) != nil {
			return true
		}
	}
	return false
}

func p50(i *webhooks.StatsInterval) *float64 { return i.LatencyP50Seconds }
func p95(i *webhooks.StatsInterval) *float64 { return i.LatencyP95Seconds }

// rateText is the window's success rate as the legend's row shows it.
func (c *chart) rateText() string {
	if c.v.SuccessRate == nil {
		return "no attempts"
	}
	return "success rate " + percent(*c.v.SuccessRate)
}

// textWidth is a generous width of s in the chart's text.
func textWidth(s string) float64 { return charWidth * float64(utf8.RuneCountInString(s)) }

func (c *chart) drawLegend() {
	for _, e := range c.legend {
		y := 8 + float64(e.row*legendRow)
		c.printf(`<rect class="legend-%s" x="%s" y="%s" width="10" height="10" fill="%s"/>`, e.class, num(e.x), num(y), e.color)
		c.printf(`<text class="legend" x="%s" y="%s" fill="%s">%s</text>`+"\n", num(e.x+14), num(y+9), colorText, esc(e.label))
	}
	c.printf(`<text class="rate" x="%d" y="17" text-anchor="end" fill="%s" font-weight="bold">%s</text>`+"\n",
		c.o.Width-marginRight, colorText, esc(c.rateText()))
}

// frame draws the axes, the scales' top values and the window's ends.
func (c *chart) frame() {
	x0, y0, w, h := c.plot()
	c.printf(`<g class="axes" stroke="%s" stroke-width="1">`, colorAxis)
	c.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(x0), num(y0+h), num(x0+w), num(y0+h))
	c.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(x0), num(y0), num(x0), num(y0+h))
	c.printf("</g>\n")
	c.printf(`<text class="scale-count" x="%s" y="%s" text-anchor="end" fill="%s">%d</text>`+"\n", num(x0-4), num(y0+4), colorText, c.maxCount())
	if l := c.latencyScale(); l > 0 {
		c.printf(`<text class="scale-latency" x="%s" y="%s" fill="%s">%s</text>`+"\n", num(x0+w+4), num(y0+4), colorText, esc(secs(l)))
	}
	when := c.when
	if textWidth(when(c.v.Since))+textWidth(when(c.v.Until))+16 > w {
		when = c.shortWhen // the two ends would run into each other
	}
	c.printf(`<text class="time-start" x="%s" y="%s" fill="%s">%s</text>`+"\n", num(x0), num(y0+h+16), colorText, esc(when(c.v.Since)))
	c.printf(`<text class="time-end" x="%s" y="%s" text-anchor="end" fill="%s">%s</text>`+"\n", num(x0+w), num(y0+h+16), colorText, esc(when(c.v.Until)))
}

// slot returns the left edge and width of interval i's bar.
func (c *chart) slot(i int) (x, w float64) {
	x0, _, pw, _ := c.plot()
	n := float64(max(len(c.v.Intervals), 1))
	each := pw / n
	gap := math.Min(each*0.2, 4)
	return x0 + each*float64(i) + gap/2, each - gap
}

// bars draws each interval's attempts: the 2xx at the bottom, the failed
// on top, each with a title that gives its numbers. An interval without
// attempts has no bar.
func (c *chart) bars() {
	_, y0, _, h := c.plot()
	top := float64(c.maxCount())
	c.printf(`<g class="bars">` + "\n")
	for i := range c.v.Intervals {
		it := &c.v.Intervals[i]
		if it.OK+it.Failed == 0 || top == 0 {
			continue
		}
		x, w := c.slot(i)
		label := c.intervalLabel(it)
		base := y0 + h
		for _, part := range []struct {
			class, color string
			n            int64
		}{{"ok", colorOK, it.OK}, {"failed", colorFailed, it.Failed}} {
			if part.n == 0 {
				continue
			}
			bh := float64(part.n) / top * h
			base -= bh
			c.printf(`<rect class="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
				part.class, num(x), num(base), num(w), num(bh), part.color, esc(label))
		}
	}
	c.printf("</g>\n")
}

// intervalLabel gives an interval's numbers in words.
func (c *chart) intervalLabel(it *webhooks.StatsInterval) string {
	s := fmt.Sprintf("%s: %d answered 2xx, %d failed", c.when(it.Start), it.OK, it.Failed)
	if it.SuccessRate != nil {
		s += ", " + percent(*it.SuccessRate)
	}
	if it.LatencyP50Seconds != nil && it.LatencyP95Seconds != nil {
		s += fmt.Sprintf("; latency p50 %s, p95 %s", secs(*it.LatencyP50Seconds), secs(*it.LatencyP95Seconds))
	}
	return s
}

// latency draws the p50 and p95 lines through the middle of each
// interval's slot on the latency scale; an interval without requests
// breaks the line, and an interval with requests between two without is a
// dot, as a line needs two points.
func (c *chart) latency() {
	scale := c.latencyScale()
	if scale == 0 {
		return
	}
	_, y0, _, h := c.plot()
	for _, l := range []struct {
		class, color, dash string
		of                 func(*webhooks.StatsInterval) *float64
	}{
		{"p50", colorP50, "", p50},
		{"p95", colorP95, ` stroke-dasharray="4 3"`, p95},
	} {
		var d strings.Builder
		var run []string // the points of the line being drawn
		end := func() {
			switch {
			case len(run) == 1:
				x, y, _ := strings.Cut(run[0], " ")
				c.printf(`<circle class="%s" cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", l.class, x, y, l.color)
			case len(run) > 1:
				if d.Len() > 0 {
					d.WriteByte(' ')
				}
				d.WriteString("M" + strings.Join(run, " L"))
			}
			run = run[:0]
		}
		for i := range c.v.Intervals {
			s := l.of(&c.v.Intervals[i])
			if s == nil {
				end()
				continue
			}
			x, w := c.slot(i)
			run = append(run, num(x+w/2)+" "+num(y0+h-*s/scale*h))
		}
		end()
		if d.Len() == 0 {
			continue
		}
		c.printf(`<path class="%s" d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", l.class, d.String(), l.color, l.dash)
	}
}

// maxCount is the highest bar, the count scale's top.
func (c *chart) maxCount() int64 {
	var m int64
	for i := range c.v.Intervals {
		m = max(m, c.v.Intervals[i].OK+c.v.Intervals[i].Failed)
	}
	return m
}

func (c *chart) maxLatency(of func(*webhooks.StatsInterval) *float64) float64 {
	var m float64
	for i := range c.v.Intervals {
		if s := of(&c.v.Intervals[i]); s != nil {
			m = math.Max(m, *s)
		}
	}
	return m
}

// latencyScale is the latency scale's top: the highest p95 (or p50),
// 0 when no interval had a request.
func (c *chart) latencyScale() float64 {
	return math.Max(c.maxLatency(p95), c.maxLatency(p50))
}

func (c *chart) when(t time.Time) string {
	return t.In(c.o.Location).Format("2006-01-02 15:04 MST")
}

// shortWhen is when without the year: Dec 4 13:00 UTC.
func (c *chart) shortWhen(t time.Time) string {
	return t.In(c.o.Location).Format("Jan 2 15:04 MST")
}

// num formats a coordinate with at most two decimals, the same way every
// time.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

func percent(r float64) string {
	return strconv.FormatFloat(math.Round(r*1000)/10, 'f', -1, 64) + "%"
}

func secs(s float64) string {
	if s < 1 {
		return strconv.FormatFloat(math.Round(s*1000), 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(math.Round(s*100)/100, 'f', -1, 64) + " s"
}

// step is an interval's length as 1h, 15m or 1h30m.
func step(seconds int64) string {
	s := (time.Duration(seconds) * time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// esc escapes text for an SVG element's content or a quoted attribute.
func esc(s string) string {
	return template.HTMLEscapeString(s)
}
