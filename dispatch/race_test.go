//go:build race

package dispatch_test

// raceEnabled: the race detector's instrumentation changes frame sizes.
const raceEnabled = true
