// Package replay is the replay harness behind `go run ./cmd/hopreplay`
// (issue 21, DESIGN.md §12): it drives a real gateway (dispatch.Engine,
// its breakers and early warning) in front of real fake providers
// (cmd/fakeupstream/upstream) through scripted incident shapes at a steady
// request rate, with and without early warning, and reports what callers
// saw and what it cost (docs/early-warning.md).
//
// Time is virtual. Every clock of the run — the gateway's, the fake
// providers' — is one Clock whose time moves only when the harness moves
// it, from one timer to the next, after everything the last move set off
// has run to a standstill; the network between gateway and providers is
// in memory (net.Pipe). A run of half an hour of traffic takes seconds,
// and two runs with the same seed make the same report.
//
// "Standstill" is read from the Go scheduler (runtime/metrics): with
// GOMAXPROCS 1, no goroutine runnable and none in a system call means
// every goroutine of the run waits on the Clock, a pipe or a channel, so
// only the next timer can move anything. Run sets GOMAXPROCS to 1 for its
// duration; nothing else may run in the process meanwhile.
//
// It is not imported by hopgate itself: only the command and its test.
package replay
