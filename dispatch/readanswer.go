package dispatch

import (
	"io"

	"github.com/hopgate/hopgate/dispatch/overload"
)

// readAnswer is readBounded for a buffered answer, whose bytes are worth
// nothing when the read fails: a body over its limit (an endless body), cut
// or stalled is a failed hop, and its bytes are dropped. Past the first
// buffer it returns nil with the error instead of joining what was read
// into one buffer of up to the limit (16 MiB for chat): that copy was
// garbage the moment it was made, outside the budget once released, and
// at 250/s with endless bodies it was the largest allocation site of the
// soak (issue 35 item 6, docs/reliability.md).
func readAnswer(r io.Reader, limit, size int64, hold *overload.Hold) ([]byte, error) {
	return readBody(r, limit, size, hold, false)
}
