package consolebrowser

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowser_RecordsDialogs checks the harness itself: the console tests
// conclude that no script of a page's data ran from an empty Dialogs, which
// means nothing unless a script's alert does show up there.
func TestBrowser_RecordsDialogs(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><p id="p">ran</p>` +
			`<script>alert("one"); document.getElementById("p").dataset.confirmed = confirm("two")</script>`))
	}))
	t.Cleanup(ts.Close)

	b := New(t)
	b.Do(chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.ID("p")))
	confirmed := Run(b, chromedp.Evaluate[string](`document.getElementById("p").dataset.confirmed`))
	require.Equal(t, "true", confirmed, "a confirm dialog is accepted")
	require.Equal(t, []Dialog{{Type: "alert", Message: "one"}, {Type: "confirm", Message: "two"}}, b.Dialogs())

	b.keep = true // as with BOTHY_TEST_SCREENSHOT_DIR set
	shot := b.Screenshot("page")
	data, err := os.ReadFile(shot)
	require.NoError(t, err)
	require.Equal(t, "\x89PNG", string(data[:4]))
}
