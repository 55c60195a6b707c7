package otlpwire

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: an
// exporter that was shut down must leave no connection or retry running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
