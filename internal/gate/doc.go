// Package gate classifies upstream frames and bodies for the L3 stream gate
// (DESIGN.md §2 "L3 stream gate" and "After commit"): is a frame decisive
// content, a finish, an in-band error, [DONE], or nothing yet?
//
// It owns the reading of chat.completions, completions and Responses API
// payloads that the gate and the mid-stream rules need: decisive kinds,
// finish_reason, tool calls, choice 0 text (for resume), usage, model and
// upstream error codes.
//
// Everything here is a pure function of its input. It must not do I/O, hold
// timers, keep per-stream state or decide policy (commit, discard, failover,
// retry): the gate loop in package dispatch does that with these answers.
package gate
