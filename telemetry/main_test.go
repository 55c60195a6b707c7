package telemetry

import (
	"testing"

	"go.uber.org/goleak"
)

// The batch span processor and the OTLP exporters start goroutines: every
// test must shut them down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
