package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind: a
// gateway that was shut down, or reloaded, must take every goroutine it
// started with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
