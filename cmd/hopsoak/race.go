//go:build race

package main

// raceEnabled: the race detector's shadow memory is never returned to the
// OS, so RSS after the drain says nothing; the drained check uses the Go
// heap instead.
const raceEnabled = true
