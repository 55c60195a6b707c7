// Package browser holds the browser tests of hopgate's pages (DESIGN.md
// §10): a real gateway on a fake clock, fake channels from
// cmd/fakeupstream, and Debian's Chromium driven by chromedp, loading
// /admin during a scripted incident, a failover's trace view from its
// link, and /status after a bad minute. It has no code outside its tests.
//
// The browser is found through HOPGATE_CHROMIUM_BIN (the Makefile's
// chromium target installs it and exports it), then chromium on PATH.
// Without one the tests skip, except under CI=true, where they fail.
// HOPGATE_SCREENSHOTS_DIR makes them also write the README's screenshots
// there (make screenshots).
package browser
