package dispatch

// Runs of frames (issue 34, docs/performance.md). After commit a frame of
// a pass-through stream is the exact bytes the reader returned, in its
// buffer right after the frame before it. An upstream that writes many
// frames at once (a burst) hands over dozens of them in one read, and
// writing each to the response on its own costs a ResponseWriter call, a
// copy into net/http's 2 KiB buffer and a chunk header every 2 KiB. The
// responder instead keeps the frames of one read as one slice of the
// reader's buffer (the run) and writes it with one call: before any other
// bytes of the answer, before a flush, and so before the next read, which
// may move the buffer (the pump flushes whenever the next frame needs a
// read). Bytes and order are unchanged, and no frame waits for a later
// one: the run goes out at the flush it would have gone out at anyway.

// runSource is a frame source whose frames can be joined into runs
// (sse.Reader).
type runSource interface {
	Extend(run, raw []byte) ([]byte, bool)
}

// joinRuns makes the responder join the frames of rd into runs; false
// when rd cannot (Bedrock's event stream), and each frame is written as
// it comes.
func (r *responder) joinRuns(rd frameSource) {
	if j, ok := rd.(runSource); ok {
		r.join = j.Extend
	}
}

// stopRuns writes the run and joins no more frames: the reader is not
// read from the pump any longer.
func (r *responder) stopRuns() {
	r.join = nil
	_ = r.writeRun()
}

// queue adds b to the run when it continues it, or starts a new run with
// it when b is a frame of the reader's buffer (after writing the run
// before it); false when b must be written as it is.
func (r *responder) queue(b []byte) bool {
	if r.join == nil {
		return false
	}
	if run, ok := r.join(r.run, b); ok {
		r.run = run
		return true
	}
	if r.writeRun() != nil {
		return false // the write of b reports the broken connection
	}
	if run, ok := r.join(nil, b); ok {
		r.run = run
		return true
	}
	return false
}

// writeRun writes the run, if any.
func (r *responder) writeRun() error {
	if len(r.run) == 0 {
		return nil
	}
	run := r.run
	r.run = nil
	_, err := r.w.Write(run)
	return err
}
