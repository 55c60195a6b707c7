package dispatch_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind: every
// hop starts a frame reader, every request a handler, and a cancelled client
// must take its upstream request down with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
