package consolebrowser

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	gosync "sync"
	"testing"
	"time"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// EnvScreenshotDir names the variable that keeps screenshots in a fixed
// place; unset, they go to the test's artifact directory.
const EnvScreenshotDir = "BOTHY_TEST_SCREENSHOT_DIR"

// EnvDocScreenshots names the variable that, set to a directory (such as
// docs/screenshots), makes DocScreenshot save the pages the
// documentation shows there.
const EnvDocScreenshots = "BOTHY_SCREENSHOTS"

// stepTimeout bounds every browser step, so a page that never shows what a
// test waits for fails that test instead of hanging the package.
const stepTimeout = 60 * time.Second

// Browser is one headless Chromium with a single tab, owned by one test.
//
// It answers every JavaScript dialog itself (accepting confirm, dismissing
// alert) and records it, so a page cannot block the test with a dialog and
// a test can check that no script of a page's data ever ran.
type Browser struct {
	t testing.TB
	*tab
}

// tab is what the Browsers of one test and its subtests share.
type tab struct {
	ctx   context.Context
	dir   string
	keep  bool // screenshots are kept after the test (see screenshotDir)
	shots int  // screenshots taken, for their file names

	mu      gosync.Mutex
	dialogs []Dialog
}

// Dialog is a JavaScript dialog a page opened.
type Dialog struct {
	Type    string // alert, confirm, prompt or beforeunload
	Message string
}

// New starts Chromium for t and closes it when t ends. Without a chromium
// binary it fails t in CI and skips it elsewhere (tooltest.Need). When the
// test binary dies without cleanups (go test -timeout, a SIGKILL), the
// kernel kills Chromium, and its children follow: chromedp's exec
// allocator starts it with a parent-death signal on Linux.
func New(t testing.TB) *Browser {
	t.Helper()
	path := tooltest.Need(t, tooltest.Chromium)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to start its sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })

	dir, keep := screenshotDir(t)
	b := &Browser{t: t, tab: &tab{ctx: ctx, dir: dir, keep: keep}}
	// The first step starts the browser; it must not run under a timeout,
	// which would close the browser with it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return // the tab is gone
			}
			b.mu.Lock()
			b.dialogs = append(b.dialogs, Dialog{Type: string(ev.Type), Message: ev.Message})
			b.mu.Unlock()
			accept := ev.Type == page.DialogTypeConfirm
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept})
		}
	}()
	return b
}

// screenshotDir is where the test's screenshots go, and whether they are
// kept after it: in $BOTHY_TEST_SCREENSHOT_DIR, else in the test's artifact
// directory, kept with go test -artifacts and removed with the test
// otherwise.
func screenshotDir(t testing.TB) (string, bool) {
	t.Helper()
	base := os.Getenv(EnvScreenshotDir)
	if base == "" {
		if at, ok := t.(interface{ ArtifactDir() string }); ok {
			f := flag.Lookup("test.artifacts")
			return at.ArtifactDir(), f != nil && f.Value.String() == "true"
		}
		return t.TempDir(), false
	}
	// A run replaces the screenshots of the test's last run, so none of
	// them is mistaken for this one's.
	dir := filepath.Join(base, safeName(t.Name()))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatalf("screenshot directory: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("screenshot directory: %v", err)
	}
	return dir, true
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// For returns the same browser for a subtest t: its steps fail t instead
// of the test that started the browser. Screenshots stay in that test's
// directory.
func (b *Browser) For(t testing.TB) *Browser { return &Browser{t: t, tab: b.tab} }

// Do runs actions in order, each step bounded by stepTimeout, and fails the
// test at the first error, with a screenshot of the page as it was.
func (b *Browser) Do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	for i, a := range actions {
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		err := chromedp.Do(ctx, a)
		cancel()
		if err != nil {
			b.t.Fatalf("browser step %d: %v%s", i+1, err, b.failure())
		}
	}
}

// Run runs one action and returns its value; an error fails the test.
func Run[T any](b *Browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %v%s", err, b.failure())
	}
	return v
}

// failure describes the page a step failed on: its URL, the start of its
// text and a screenshot.
func (b *Browser) failure() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 500) : ""`))
	msg := fmt.Sprintf("\npage %s\n%s", b.Location(), text)
	if shot := b.Screenshot("failed"); shot != "" {
		msg += "\nscreenshot " + shot
	}
	return msg
}

// Location is the URL of the tab, or "" if it cannot be read.
func (b *Browser) Location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	u, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return ""
	}
	return u
}

// Screenshot saves a full-page PNG of the tab as NN-name.png in the test's
// screenshot directory, logs and returns its path; it returns "" (and only
// logs) when the page cannot be captured. Where the screenshots would be
// removed with the test, it takes none and returns "": a full-page capture
// costs the browser more than most steps.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	if !b.keep {
		return ""
	}
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is PNG
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	b.shots++
	path := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shots, safeName(name)))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// DocScreenshot saves a full-page PNG of the tab, width pixels wide, as
// name.png in $BOTHY_SCREENSHOTS for the documentation; without the
// variable it does nothing. The viewport is width wide while the picture is
// taken and as the test had it afterwards; a mobile viewport (a phone test)
// is kept mobile.
func (b *Browser) DocScreenshot(name string, width int64, mobile bool) {
	b.t.Helper()
	dir := os.Getenv(EnvDocScreenshots)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatalf("doc screenshot directory: %v", err)
	}
	opts := []chromedp.EmulateViewportOption{}
	if mobile {
		opts = append(opts, chromedp.EmulateMobile)
	}
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.EmulateViewport(width, 800, opts...)); err != nil {
		b.t.Fatalf("doc screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("doc screenshot %s: %v", name, err)
	}
	if !mobile {
		if _, err := chromedp.Run(ctx, chromedp.EmulateReset()); err != nil {
			b.t.Fatalf("doc screenshot %s: %v", name, err)
		}
	}
	path := filepath.Join(dir, safeName(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("doc screenshot %s: %v", name, err)
	}
	b.t.Logf("doc screenshot: %s", path)
}

// Dialogs returns the JavaScript dialogs opened so far.
func (b *Browser) Dialogs() []Dialog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Dialog(nil), b.dialogs...)
}

// Context is the tab's context, for chromedp calls a test makes itself.
func (b *Browser) Context() context.Context { return b.ctx }
