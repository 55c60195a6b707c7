package breaker

import "time"

// Clock is the only source of time for a Breaker. clockwork.Clock (real and
// fake) satisfies it.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
