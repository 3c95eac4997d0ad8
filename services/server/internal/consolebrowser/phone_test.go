package consolebrowser

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// phoneWidth is the width, in CSS pixels, of the phone the layout tests
// emulate.
const phoneWidth = 375

// box is an element's place on the page, in CSS pixels.
type box struct {
	Text                     string
	Left, Right, Top, Bottom float64
}

// rowsOfJS counts the rows the elements the CSS selector (the argument
// sel) matches are laid out in, by their vertical centres: elements that
// share a row of a flex line are centred alike.
const rowsOfJS = `(sel => {
	const centres = Array.from(document.querySelectorAll(sel))
		.map(e => e.getBoundingClientRect()).filter(r => r.width > 0)
		.map(r => (r.top + r.bottom) / 2).sort((a, b) => a - b);
	let rows = 0, last = -100;
	for (const c of centres) { if (c - last > 4) { rows++; last = c; } }
	return rows;
})`

// chartTextJS returns the shown chart's texts with the size they are
// drawn at (their font size times the drawing's scale) and their boxes.
const chartTextJS = `(() => {
	const svg = Array.from(document.querySelectorAll('#chart-attempts svg')).find(s => s.getBoundingClientRect().width > 0);
	if (!svg) return null;
	const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
	return Array.from(svg.querySelectorAll('text')).map(t => {
		const r = t.getBoundingClientRect();
		return {Text: t.textContent, Size: parseFloat(getComputedStyle(t).fontSize) * scale,
			Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom};
	});
})()`

// legendJS returns, for each entry of the shown chart's legend, whether
// the chart draws that part: an element of its class (a bar, a line or a
// dot) with a size.
const legendJS = `(() => {
	const svg = Array.from(document.querySelectorAll('#chart-attempts svg')).find(s => s.getBoundingClientRect().width > 0);
	return Object.fromEntries(Array.from(svg.querySelectorAll('rect[class^="legend-"]')).map(r => {
		const part = r.getAttribute('class').slice('legend-'.length);
		const drawn = Array.from(svg.querySelectorAll('.' + part)).some(e => {
			const b = e.getBBox();
			return b.width > 0 && b.height > 0;
		});
		return [part, drawn];
	}));
})()`

// urlBreaksJS returns the number of lines the element the argument
// (a CSS selector) matches takes, and each line break that falls inside a
// word (between two letters or digits), as "before|after".
const urlBreaksJS = `(sel => {
	const el = document.querySelector(sel);
	const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
	const bad = [];
	let lines = 0, lastTop = null, prev = '', text = '';
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		for (let i = 0; i < n.length; i++) {
			const r = document.createRange();
			r.setStart(n, i);
			r.setEnd(n, i + 1);
			const rects = r.getClientRects();
			if (!rects.length) continue;
			const top = rects[0].top;
			if (lastTop === null || top > lastTop + 2) {
				lines++;
				if (lastTop !== null && /[A-Za-z0-9]/.test(prev) && /[A-Za-z0-9]/.test(n.data[i])) bad.push(text + '|' + n.data.slice(i));
			}
			lastTop = top;
			prev = n.data[i];
			text += n.data[i];
		}
	}
	return {Lines: lines, Bad: bad};
})`

// TestConsole_PhoneWidth looks at the console at a phone's width (375
// CSS pixels) as its user would: on every page nothing scrolls sideways,
// not the page and no box in it, and the header keeps two rows; the chart's text is drawn
// at a readable size, none of it overlapping, and its legend names only
// parts it draws (with one hour of data); a long URL in a heading wraps
// only where a URL may; and each delivery's Resend is on screen. The
// screenshots go to the test's screenshot directory
// ($BOTHY_TEST_SCREENSHOT_DIR).
func TestConsole_PhoneWidth(t *testing.T) {
	t.Parallel()
	f := setup(t)
	long := f.receiver.srv.Base() + "/acme/webhooks/incoming-deliveries-from-bothy/tenant-0042?source=bothy&region=eu-west-1"
	var sub struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusCreated, f.api(t, http.MethodPost, "/v1/webhooks", f.aliceToken,
		map[string]any{"space": "acme", "url": long}, &sub))
	f.appendEvents(t, f.aliceToken, "acme", 2)
	f.waitDelivered(t, f.aliceToken, sub.ID, 2)

	b := New(t)
	b.Do(chromedp.EmulateViewport(phoneWidth, 740, chromedp.EmulateMobile))
	signIn(f, b, f.aliceToken)

	noSidewaysScroll := func(t *testing.T, page string) {
		t.Helper()
		w := Run(b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
		require.Equal(t, phoneWidth, w[1])
		require.LessOrEqual(t, w[0], w[1], "%s: the page is wider than the screen", page)
		wide := Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('.scroll, table'))
			.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className)`))
		require.Empty(t, wide, "%s: these scroll sideways", page)
	}
	headerRows := func(t *testing.T, page string) {
		t.Helper()
		rows := Run(b, chromedp.Evaluate[int](rowsOfJS+`('header .brand, header nav a, #principal, #portal-banner, header button')`))
		require.LessOrEqual(t, rows, 2, "%s: the header takes %d rows", page, rows)
	}

	t.Run("Subscriptions", func(t *testing.T) {
		b := b.For(t)
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions"), shows(`[data-testid="subscriptions"]`))
		noSidewaysScroll(t, "subscriptions")
		headerRows(t, "subscriptions")
		b.Screenshot("phone-subscriptions")
		b.DocScreenshot("phone-subscriptions", phoneWidth, true)
	})

	t.Run("Subscription", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, sub.ID)
		b.Screenshot("phone-subscription")
		b.DocScreenshot("phone-subscription", phoneWidth, true)
		noSidewaysScroll(t, "subscription")
		headerRows(t, "subscription")

		// The heading's URL wraps between its parts, never inside one.
		br := Run(b, chromedp.Evaluate[struct {
			Lines int
			Bad   []string
		}](urlBreaksJS+`('#subscription-url')`))
		require.GreaterOrEqual(t, br.Lines, 2, "the long URL wraps")
		require.Empty(t, br.Bad, "the URL wraps inside a word")

		// The chart: text at a readable size, none of it overlapping.
		texts := Run(b, chromedp.Evaluate[[]struct {
			box
			Size float64
		}](chartTextJS))
		require.NotEmpty(t, texts, "a chart is shown")
		svg := Run(b, chromedp.Evaluate[box](`(() => {
			const r = Array.from(document.querySelectorAll('#chart-attempts svg')).find(s => s.getBoundingClientRect().width > 0).getBoundingClientRect();
			return {Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom};
		})()`))
		require.LessOrEqual(t, svg.Right, float64(phoneWidth))
		for i, a := range texts {
			require.GreaterOrEqual(t, a.Size, 10.0, "%q is drawn at %.1f px", a.Text, a.Size)
			require.GreaterOrEqual(t, a.Left, svg.Left-0.5, "%q starts left of the chart", a.Text)
			require.LessOrEqual(t, a.Right, svg.Right+0.5, "%q runs past the chart's right edge", a.Text)
			for _, o := range texts[i+1:] {
				overlap := a.Left < o.Right && o.Left < a.Right && a.Top < o.Bottom && o.Top < a.Bottom
				require.False(t, overlap, "%q and %q overlap", a.Text, o.Text)
			}
		}
		// One hour of data: the legend names only what is drawn.
		legend := Run(b, chromedp.Evaluate[map[string]bool](legendJS))
		require.Contains(t, legend, "ok")
		for part, drawn := range legend {
			require.True(t, drawn, "the legend names %s, which the chart does not draw", part)
		}

		// Each delivery's Resend is on the screen, not off to the right.
		resend := Run(b, chromedp.Evaluate[[]box](`Array.from(document.querySelectorAll('[data-testid="delivery-row"] [data-testid="action-resend"]'))
			.map(e => { const r = e.getBoundingClientRect(); return {Text: e.textContent, Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom}; })`))
		require.Len(t, resend, 2)
		for _, r := range resend {
			require.Positive(t, r.Right-r.Left)
			require.GreaterOrEqual(t, r.Left, 0.0)
			require.LessOrEqual(t, r.Right, float64(phoneWidth), "Resend is off the screen")
		}
	})

	t.Run("Delivery", func(t *testing.T) {
		b := b.For(t)
		b.Do(chromedp.Click(testID("delivery-link")), shows("#message-body"),
			chromedp.Click(chromedp.CSS(`[data-testid="attempt-request"] summary`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="request-headers"]`)))
		noSidewaysScroll(t, "delivery")
		headerRows(t, "delivery")
		br := Run(b, chromedp.Evaluate[struct {
			Lines int
			Bad   []string
		}](urlBreaksJS+`('#delivery-back')`))
		require.Empty(t, br.Bad, "the URL wraps inside a word")
		b.Screenshot("phone-delivery")
	})

	for _, p := range []struct{ name, path, shown string }{
		{"CreateForm", "/console/subscriptions/new", "#subscription-form"},
		{"Lag", "/console/lag", "main h1"},
		{"Push", "/console/push?space=acme", "main h1"},
	} {
		t.Run(p.name, func(t *testing.T) {
			b := b.For(t)
			b.Do(chromedp.Navigate(f.base+p.path), shows(p.shown))
			noSidewaysScroll(t, p.name)
			headerRows(t, p.name)
			b.Screenshot("phone-" + p.name)
		})
	}
}
