package dispatch

// The chunks long bodies are read in (readChunks) are recycled through a
// bounded free list, not a sync.Pool. A pool keeps every chunk put into it
// until the second collection after, and an endless body puts back
// max_response_bytes of them at once (256 chunks for chat's 16 MiB): under
// the soak at 250/s (docs/reliability.md) the pool held 170 MB of idle
// chunks that the buffer budget no longer counted — most of the live heap
// while the budget had 59 MiB in use. The free list keeps at most
// maxIdleChunks; a chunk given back past it is left to the collector,
// which is garbage of the body's size once, as io.ReadAll would leave.

// chunkSize is the unit a long body is read in.
const chunkSize = 64 << 10

// maxIdleChunks bounds the idle chunks kept for reuse (4 MiB): enough for
// the long answers of ordinary traffic, small beside the budget.
const maxIdleChunks = 64

var idleChunks = make(chan *[]byte, maxIdleChunks)

// getChunk returns an empty chunk of capacity chunkSize.
func getChunk() *[]byte {
	select {
	case c := <-idleChunks:
		return c
	default:
		b := make([]byte, 0, chunkSize)
		return &b
	}
}

// putChunk gives c back: kept when the free list has room, else dropped.
func putChunk(c *[]byte) {
	*c = (*c)[:0]
	select {
	case idleChunks <- c:
	default:
	}
}
