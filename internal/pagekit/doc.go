// Package pagekit holds what hopgate's server-rendered pages share (the
// on-call page and trace view on the admin listener, the public status
// page): the base stylesheet, the small refresh script, and the security
// headers that let a browser run only those two (a Content-Security-Policy
// with their hashes, so an injected <script> would not run even if a
// template ever failed to escape it). Pages embed everything: no external
// fonts, CDNs or build step. It must not import dispatch or telemetry.
package pagekit
