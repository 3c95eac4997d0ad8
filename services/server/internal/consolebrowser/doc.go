// Package consolebrowser tests the web console in a real browser: Debian's
// Chromium, started headless by chromedp for each test with a profile of its
// own, signs in, clicks through the pages and submits the forms as a person
// would, against a real server on a scratch database.
//
// Without a chromium binary in PATH the tests fail in CI (CI=true) and are
// skipped elsewhere, saying how to install it (tooltest.Need).
//
// Each test keeps full-page PNG screenshots of the pages it visits: under
// $BOTHY_TEST_SCREENSHOT_DIR/<test name>/ when that is set (CI sets
// /tmp/bothy-screenshots; a run replaces the test's earlier ones), else in the test's artifact directory, which
// `go test -artifacts -outputdir DIR` keeps under DIR and a plain `go test`
// removes. Every screenshot's path is in the test log (-v).
package consolebrowser
