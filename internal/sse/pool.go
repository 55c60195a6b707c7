package sse

import "io"

// Readers and their buffers are recycled through bounded free lists, not a
// sync.Pool (as dispatch's body chunks are, for the reason given there: a
// pool keeps all it was given until the second collection after). A
// gateway opens a reader per stream; before the free lists a burst stream
// allocated its 16 KiB burst buffer (and a 1 KiB one before it) and the
// reader itself, about a third of the bytes the gateway allocated per
// burst stream (docs/performance.md, per-request work). Only the two
// sizes a stream starts with and bursts to are kept: a buffer grown by
// doubling for a large frame is left to the collector, and an idle
// stream still holds 1 KiB, not a burst buffer it does not need.
const (
	maxIdleReaders = 256
	maxIdleSmall   = 256 // 256 KiB
	maxIdleBurst   = 64  // 1 MiB
)

var (
	idleReaders = make(chan *Reader, maxIdleReaders)
	idleSmall   = make(chan *[initialBuf]byte, maxIdleSmall)
	idleBurst   = make(chan *[burstBuf]byte, maxIdleBurst)
)

// Get returns a reader of rd as NewReader does, recycled from one that
// was Released when there is one. Release it once its last frame is no
// longer used.
func Get(rd io.Reader, maxFrame int) *Reader {
	select {
	case r := <-idleReaders:
		if maxFrame <= 0 {
			maxFrame = DefaultMaxFrame
		}
		r.maxFrame = maxFrame
		r.Reset(rd)
		return r
	default:
		return NewReader(rd, maxFrame)
	}
}

// Release gives the reader and its buffer back for reuse by Get (both are
// dropped when their free list is full). Every frame it returned, and
// every slice Extend joined, is invalid from then on, and so is the
// reader: a Release while another goroutine may still be in Next (or in
// the underlying Read) is a data race.
func (r *Reader) Release() {
	putBuf(r.buf)
	r.buf = nil
	r.rd = nil
	r.Reset(nil)
	select {
	case idleReaders <- r:
	default:
	}
}

// getBuf returns a buffer of n bytes (not zeroed: the reader only reads
// what it has read into it), recycled when n is one of the kept sizes.
func getBuf(n int) []byte {
	switch n {
	case initialBuf:
		select {
		case b := <-idleSmall:
			return b[:]
		default:
		}
	case burstBuf:
		select {
		case b := <-idleBurst:
			return b[:]
		default:
		}
	}
	return make([]byte, n)
}

// putBuf keeps b for getBuf when it is one of the kept sizes and its free
// list has room.
func putBuf(b []byte) {
	switch cap(b) {
	case initialBuf:
		select {
		case idleSmall <- (*[initialBuf]byte)(b[:initialBuf]):
		default:
		}
	case burstBuf:
		select {
		case idleBurst <- (*[burstBuf]byte)(b[:burstBuf]):
		default:
		}
	}
}
