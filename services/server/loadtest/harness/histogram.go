package harness

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colAxis       = color.RGBA{60, 60, 60, 255}
	colGrid       = color.RGBA{225, 225, 225, 255}
	colBar        = color.RGBA{70, 130, 180, 255}
	colP50        = color.RGBA{46, 139, 87, 255}
	colP95        = color.RGBA{255, 140, 0, 255}
	colP99        = color.RGBA{148, 0, 211, 255}
	colBudget     = color.RGBA{220, 20, 60, 255}
)

// Panel is one latency histogram of a PNG.
type Panel struct {
	// Title is printed above the panel; Axis under its x axis.
	Title, Axis string
	// Latencies are sorted ascending.
	Latencies          []time.Duration
	P50, P95, P99, Max time.Duration
}

// WriteHistogram draws one histogram per panel, stacked, on one x range,
// with the p50, p95, p99 and the budget marked, and writes it as a PNG.
func WriteHistogram(path string, panels []Panel, budget time.Duration) error {
	const width, panelH, margin = 1000, 300, 60
	img := image.NewRGBA(image.Rect(0, 0, width, panelH*len(panels)))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBackground}, image.Point{}, draw.Src)

	// One x range for all panels so they compare at a glance.
	xmax := budget * 2
	for _, p := range panels {
		xmax = max(xmax, p.P99*5/4)
	}
	xmax = min(xmax, 10*budget)
	for i := range panels {
		drawPanel(img, image.Rect(0, i*panelH, width, (i+1)*panelH), margin, &panels[i], budget, xmax)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func drawPanel(img *image.RGBA, area image.Rectangle, margin int, p *Panel, budget, xmax time.Duration) {
	plot := image.Rect(area.Min.X+margin, area.Min.Y+40, area.Max.X-20, area.Max.Y-40)
	const bins = 100
	binW := max(xmax/bins, 1)
	counts := make([]int, bins+1) // the last bin holds everything at or above xmax
	for _, l := range p.Latencies {
		counts[min(int(max(l, 0)/binW), bins)]++
	}
	top := 1
	for _, c := range counts {
		top = max(top, c)
	}
	x := func(d time.Duration) int {
		return plot.Min.X + int(float64(plot.Dx())*float64(min(d, xmax))/float64(xmax))
	}
	// Grid and x labels every tenth of the range.
	for k := 0; k <= 10; k++ {
		d := xmax * time.Duration(k) / 10
		vline(img, x(d), plot.Min.Y, plot.Max.Y, colGrid)
		label(img, x(d)-12, plot.Max.Y+16, fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)), colAxis)
	}
	axis := p.Axis + " (last bar: at or above the range)"
	label(img, plot.Max.X-7*len(axis), plot.Max.Y+34, axis, colAxis)
	for k := 0; k <= 4; k++ {
		y := plot.Max.Y - plot.Dy()*k/4
		hline(img, plot.Min.X, plot.Max.X, y, colGrid)
		label(img, area.Min.X+4, y+4, fmt.Sprintf("%d", top*k/4), colAxis)
	}
	// Bars.
	bw := float64(plot.Dx()) / float64(bins+1)
	for i, c := range counts {
		if c == 0 {
			continue
		}
		h := plot.Dy() * c / top
		x0 := plot.Min.X + int(float64(i)*bw)
		x1 := plot.Min.X + int(float64(i+1)*bw) - 1
		draw.Draw(img, image.Rect(x0, plot.Max.Y-h, max(x1, x0+1), plot.Max.Y), &image.Uniform{colBar}, image.Point{}, draw.Src)
	}
	hline(img, plot.Min.X, plot.Max.X, plot.Max.Y, colAxis)
	vline(img, plot.Min.X, plot.Min.Y, plot.Max.Y, colAxis)
	// Markers.
	for _, m := range []struct {
		d   time.Duration
		col color.RGBA
	}{{p.P50, colP50}, {p.P95, colP95}, {p.P99, colP99}, {budget, colBudget}} {
		vline(img, x(m.d), plot.Min.Y, plot.Max.Y, m.col)
		vline(img, x(m.d)+1, plot.Min.Y, plot.Max.Y, m.col)
	}
	label(img, plot.Min.X, area.Min.Y+16, p.Title, colAxis)
	lx := plot.Min.X
	for _, l := range []struct {
		text string
		col  color.RGBA
	}{
		{"p50 " + MS(p.P50), colP50}, {"p95 " + MS(p.P95), colP95}, {"p99 " + MS(p.P99), colP99},
		{"max " + MS(p.Max), colAxis}, {"budget " + MS(budget), colBudget},
	} {
		label(img, lx, area.Min.Y+32, l.text, l.col)
		lx += 7*len(l.text) + 20
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
