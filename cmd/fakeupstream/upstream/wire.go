package upstream

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Fixed fault frames. The malformed frame is the one real providers emit
// when a proxy truncates a line; the error frame is what OpenAI-compatible
// providers send when the model fails after 200.
var (
	frameMalformed = []byte("data: {not json\n\n")
	frameDone      = []byte("data: [DONE]\n\n")
	frameKeepAlive = []byte(": keep-alive\n\n")
)

// streamPlan is a healthy event stream, before faults are applied. Content
// frames are rendered lazily so long answers are not held in memory.
type streamPlan struct {
	head    [][]byte           // role chunk / response.created / message_start: not decisive
	n       int                // number of content frames
	content func(i int) []byte // i in [0, n); one frame may hold several events
	closing int                // leading tail frames that only close content blocks (kept by cut-before-finish)
	tail    [][]byte           // finish chunk, usage chunk, response.completed, message_delta
	end     []byte             // terminal frame ([DONE], message_stop), left out by no-done; nil: none
	endless []byte             // start of the never-ending frame (endless faults)

	// The framing; zero values are OpenAI's server-sent events.
	contentType   string                  // "": text/event-stream; charset=utf-8
	errFrame      func(event bool) []byte // stream-error(-event) frame; nil: OpenAI's data / event: error
	malformed     []byte                  // nil: frameMalformed
	slowAfterHead bool                    // slow-first-token: head at once, then the wait (no keep-alive comment)
	endlessMax    int                     // >0: the endless frame stops at this many bytes and hangs
}

// sse renders one data-only frame.
func sse(payload []byte) []byte {
	b := make([]byte, 0, len(payload)+8)
	b = append(b, "data: "...)
	b = append(b, payload...)
	return append(b, "\n\n"...)
}

// sseEvent renders one frame with an event name.
func sseEvent(event string, payload []byte) []byte {
	return append([]byte("event: "+event+"\n"), sse(payload)...)
}

// wait blocks for d on the server clock, or until the client goes away
// (error) or the server is closed (the response is aborted).
func (ex *exchange) wait(d time.Duration) error {
	t := ex.s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ex.ctx.Done():
		return ex.ctx.Err()
	case <-ex.s.closed:
		ex.abort() // a half answer must not look complete
	}
	return nil
}

// frame writes and flushes one frame, waiting the frame delay before every
// frame but the first.
func (ex *exchange) frame(b []byte) error {
	if ex.delay > 0 && ex.frames > 0 {
		if err := ex.wait(ex.delay); err != nil {
			return err
		}
	}
	ex.frames++
	if _, err := ex.w.Write(b); err != nil {
		return err
	}
	return ex.rc.Flush()
}

// abort kills the response: net/http closes the connection without the
// terminating chunk (or short of Content-Length), which the client reads as
// io.ErrUnexpectedEOF; before any flush, the client sees no response at all.
// Like httputil.ReverseProxy after headers are sent. Unflushed bytes are
// lost: flush first what the client must receive.
func (ex *exchange) abort() {
	panic(http.ErrAbortHandler)
}

// reset closes the TCP connection with RST before any response byte: what a
// crashing provider or a load balancer dropping the flow looks like.
func (ex *exchange) reset() {
	conn, _, err := ex.rc.Hijack()
	if err != nil { // HTTP/2: aborting sends RST_STREAM, the closest match
		panic(http.ErrAbortHandler)
	}
	raw := conn
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS
		raw = nc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// endless writes a body that never ends: start, then filler without a
// newline, until the client or the server goes away. With limit > 0 the
// filler stops once limit bytes were written in all and the handler hangs:
// a binary frame that declared its length cannot run past it.
func (ex *exchange) endless(start []byte, limit int) {
	filler := bytes.Repeat([]byte("x"), 32<<10)
	if ex.frame(start) != nil {
		return
	}
	written := len(start)
	for {
		select {
		case <-ex.ctx.Done():
			return
		case <-ex.s.closed:
			ex.abort()
		default:
		}
		chunk := filler
		if limit > 0 {
			if written >= limit {
				select {
				case <-ex.ctx.Done():
					return
				case <-ex.s.closed:
					ex.abort()
				}
			}
			chunk = filler[:min(len(filler), limit-written)]
		}
		if ex.frame(chunk) != nil {
			return
		}
		written += len(chunk)
	}
}

// stream answers with the plan, applying the fault.
func (ex *exchange) stream(p streamPlan) {
	f := ex.fault
	switch f.Kind {
	case KindErrorBody, KindBadJSON:
		ex.body("application/json", nil) // same as non-streaming
		return
	case KindShortBody:
		var all bytes.Buffer
		all.Write(bytes.Join(p.head, nil))
		for i := range p.n {
			all.Write(p.content(i))
		}
		all.Write(bytes.Join(p.tail, nil))
		all.Write(p.end)
		ex.short(p.mediaType(), all.Bytes(), all.Len()+64)
		return
	}
	h := ex.w.Header()
	h.Set("Content-Type", p.mediaType())
	if p.contentType == "" {
		h.Set("Cache-Control", "no-cache")
	}
	ex.w.WriteHeader(http.StatusOK)
	if ex.rc.Flush() != nil {
		return
	}
	if f.Kind == KindSlowFirstToken && !p.slowAfterHead {
		// A comment right away: keep-alives are not decisive for a gate.
		if ex.frame(frameKeepAlive) != nil || ex.wait(f.Duration) != nil {
			return
		}
	}
	for _, b := range p.head {
		if ex.frame(b) != nil {
			return
		}
	}
	if f.Kind == KindSlowFirstToken && p.slowAfterHead {
		if ex.wait(f.Duration) != nil {
			return
		}
	}
	switch f.Kind {
	case KindStreamError, KindStreamErrorEvent:
		_ = ex.frame(p.errorFrame(f.Kind == KindStreamErrorEvent, ex))
		return
	case KindEndlessFrame, KindEndlessBody:
		ex.endless(p.endless, p.endlessMax)
		return
	}
	mid := max(1, p.n/2)
	for i := 0; i <= p.n; i++ { // i is the position before content frame i
		switch {
		case f.Kind == KindCut && i == min(f.Cut, p.n):
			ex.abort()
		case f.Kind == KindStreamErrorAfter && i == min(f.After, p.n):
			_ = ex.frame(p.errorFrame(true, ex))
			return
		case f.Kind == KindStall && i == min(mid, p.n):
			if ex.wait(f.Duration) != nil {
				return
			}
		case f.Kind == KindMalformed && i == min(mid, p.n):
			bad := p.malformed
			if bad == nil {
				bad = frameMalformed
			}
			if ex.frame(bad) != nil {
				return
			}
		}
		if i == p.n {
			break
		}
		if ex.frame(p.content(i)) != nil {
			return
		}
	}
	for i, b := range p.tail {
		if f.Kind == KindCutBeforeFinish && i == p.closing {
			ex.abort()
		}
		if ex.frame(b) != nil {
			return
		}
	}
	if f.Kind == KindCutBeforeFinish {
		ex.abort()
	}
	if p.end != nil && f.Kind != KindNoDone {
		_ = ex.frame(p.end)
	}
}

func (p streamPlan) mediaType() string {
	if p.contentType != "" {
		return p.contentType
	}
	return "text/event-stream; charset=utf-8"
}

// errorFrame is the in-stream error of the plan's framing: a data-only or
// an "event: error" frame for OpenAI.
func (p streamPlan) errorFrame(event bool, ex *exchange) []byte {
	if p.errFrame != nil {
		return p.errFrame(event)
	}
	payload := ex.openAIStreamError()
	if event {
		return sseEvent("error", payload)
	}
	return sse(payload)
}

// body answers a non-streaming request with a complete body, applying the
// fault. endless is the start of the never-ending variant of the body; nil
// means the endpoint has none and a generic one is used.
func (ex *exchange) body(contentType string, body []byte) {
	ex.bodyEndless(contentType, body, nil)
}

func (ex *exchange) bodyEndless(contentType string, body, endless []byte) {
	switch ex.fault.Kind {
	case KindErrorBody, KindStreamError, KindStreamErrorEvent, KindStreamErrorAfter:
		writeBody(ex.w, http.StatusOK, "application/json", ex.errorBody())
	case KindBadJSON, KindMalformed:
		writeBody(ex.w, http.StatusOK, "application/json", []byte("<html><body>upstream temporarily unavailable</body></html>\n"))
	case KindEndlessBody, KindEndlessFrame:
		if endless == nil {
			endless = []byte(`{"id":"endless","data":"`)
		}
		ex.w.Header().Set("Content-Type", contentType)
		ex.w.WriteHeader(http.StatusOK)
		ex.endless(endless, 0)
	case KindShortBody:
		ex.short(contentType, body, len(body)+64)
	case KindCut, KindCutBeforeFinish:
		ex.short(contentType, body[:len(body)/2], len(body))
	case KindSlowFirstToken, KindStall:
		// Headers at once, then the body (or its second half) only after
		// the wait: what a gateway's body idle timeout must catch.
		split := 0
		if ex.fault.Kind == KindStall {
			split = len(body) / 2
		}
		ex.w.Header().Set("Content-Type", contentType)
		ex.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		ex.w.WriteHeader(http.StatusOK)
		if ex.frame(body[:split]) != nil || ex.wait(ex.fault.Duration) != nil {
			return
		}
		_, _ = ex.w.Write(body[split:])
	default:
		writeBody(ex.w, http.StatusOK, contentType, body)
	}
}

// short declares Content-Length: declared, writes body, and aborts.
func (ex *exchange) short(contentType string, body []byte, declared int) {
	ex.w.Header().Set("Content-Type", contentType)
	ex.w.Header().Set("Content-Length", strconv.Itoa(declared))
	ex.w.WriteHeader(http.StatusOK)
	_, _ = ex.w.Write(body)
	_ = ex.rc.Flush()
	ex.abort()
}
