package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind: a
// request the handler gave up on must not keep reading its body, and every
// server a test starts must be closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
