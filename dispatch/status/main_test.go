package status

import (
	"testing"

	"go.uber.org/goleak"
)

// Recorder.Run is a goroutine for the life of the gateway: every test
// that starts it (or a flush) must see it end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
