package consolebrowser

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_PreviewFilterAndTransform types a filter and a transform on
// the edit page, previews them on the space's recent events (which events
// would be sent, and the body of each) without saving, shows a refused
// expression next to its field, and saves.
func TestConsole_PreviewFilterAndTransform(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)
	f.appendEvents(t, f.aliceToken, "acme", 3) // n = 0, 1, 2 after the fixture's 0, 1

	openSubscription(f, b, f.aliceSub)
	b.Do(chromedp.Click(chromedp.ID("action-edit")), shows("#subscription-form"),
		fill("filter", "data.n > 0"),
		fill("transform", "{'n': data.n, 'kind': type}"),
		chromedp.Click(chromedp.ID("form-preview")), shows(`[data-testid="preview"]`))
	rows := Run(b, chromedp.Evaluate[[][]string](`[...document.querySelectorAll('[data-testid="preview-row"]')].map(
		r => [...r.querySelectorAll("td")].slice(2).map(td => td.innerText.trim()))`))
	require.Equal(t, [][]string{
		{"no", "—"}, {"yes", `{"kind":"item.created","n":1}`},
		{"no", "—"}, {"yes", `{"kind":"item.created","n":1}`}, {"yes", `{"kind":"item.created","n":2}`},
	}, rows)
	b.Screenshot("edit-preview")
	b.DocScreenshot("edit-preview", 1000, false)
	require.Empty(t, f.policyOf(t, f.aliceToken, f.aliceSub).Filter, "a preview saves nothing")

	b.Do(fill("filter", "data.n >"), chromedp.Click(chromedp.ID("form-preview")), shows("#field-filter .field-error"))
	require.Contains(t, fieldError(b, "filter"), "filter: 1:")
	b.Screenshot("edit-preview-refused")

	b.Do(fill("filter", "data.n > 1"), chromedp.Click(chromedp.ID("form-submit")), shows("#saved-message"))
	require.Contains(t, text(b, "#subscription-filter"), "data.n > 1")
	var sub struct {
		Filter    string `json:"filter"`
		Transform string `json:"transform"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/webhooks/"+f.aliceSub, f.aliceToken, nil, &sub))
	require.Equal(t, "data.n > 1", sub.Filter)
	require.Equal(t, "{'n': data.n, 'kind': type}", sub.Transform)
}
