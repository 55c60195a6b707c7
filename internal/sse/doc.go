// Package sse reads Server-Sent Events frames from an upstream provider's
// response body (WHATWG HTML §9.2 "Server-sent events", event stream
// interpretation).
//
// It owns framing only: splitting bytes into frames at blank lines (LF, CRLF
// or lone CR), keeping each frame's exact bytes so it can be forwarded
// byte-identical, and extracting the `event` and `data` fields. Memory per
// stream is bounded by the frame limit, and a steady stream costs no
// allocations. A proxy opening a reader per stream gets one with Get and
// gives it back with Release at the stream's end: readers and their usual
// buffers (1 KiB, and 16 KiB after a burst) are recycled through bounded
// free lists (pool.go).
//
// It must not decide anything about a frame's meaning (package gate does),
// and it has no I/O policy: no timers, deadlines, retries or flushing. The
// caller owns the io.Reader and its deadlines.
package sse
