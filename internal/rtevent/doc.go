// Package rtevent reads the few fields of a realtime WebSocket event
// (OpenAI Realtime's JSON text messages) that hopgate's session gate and
// ledger need: the event's type, an error event's code and message, a
// response.done's response id and usage. Everything else of an event is
// skipped, never decoded: after commit the bytes pass through as they
// came (DESIGN.md §15).
//
// It owns nothing but this reading: no I/O, no state between calls, no
// knowledge of sessions or channels (package dispatch owns those).
package rtevent
