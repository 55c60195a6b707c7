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
	errorPayload   = errorJSON("server_error", "stream_error", "", "fakeupstream: the model failed while generating")
)

// streamPlan is a healthy event stream, before faults are applied. Content
// frames are rendered lazily so long answers are not held in memory.
type streamPlan struct {
	head    [][]byte           // role chunk / response.created: not decisive
	n       int                // number of content frames
	content func(i int) []byte // i in [0, n)
	tail    [][]byte           // finish chunk, usage chunk, response.completed
	done    bool               // end with data: [DONE]
	endless []byte             // start of the never-ending data line (endless faults)
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
// newline, until the client or the server goes away.
func (ex *exchange) endless(start []byte) {
	filler := bytes.Repeat([]byte("x"), 32<<10)
	if ex.frame(start) != nil {
		return
	}
	for {
		select {
		case <-ex.ctx.Done():
			return
		case <-ex.s.closed:
			ex.abort()
		default:
		}
		if ex.frame(filler) != nil {
			return
		}
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
		if p.done {
			all.Write(frameDone)
		}
		ex.short("text/event-stream", all.Bytes(), all.Len()+64)
		return
	}
	h := ex.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	ex.w.WriteHeader(http.StatusOK)
	if ex.rc.Flush() != nil {
		return
	}
	if f.Kind == KindSlowFirstToken {
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
	switch f.Kind {
	case KindStreamError:
		_ = ex.frame(sse(errorPayload))
		return
	case KindStreamErrorEvent:
		_ = ex.frame(sseEvent("error", errorPayload))
		return
	case KindEndlessFrame, KindEndlessBody:
		ex.endless(p.endless)
		return
	}
	mid := max(1, p.n/2)
	for i := 0; i <= p.n; i++ { // i is the position before content frame i
		switch {
		case f.Kind == KindCut && i == min(f.Cut, p.n):
			ex.abort()
		case f.Kind == KindStall && i == min(mid, p.n):
			if ex.wait(f.Duration) != nil {
				return
			}
		case f.Kind == KindMalformed && i == min(mid, p.n):
			if ex.frame(frameMalformed) != nil {
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
	for _, b := range p.tail {
		if ex.frame(b) != nil {
			return
		}
	}
	if p.done && f.Kind != KindNoDone {
		_ = ex.frame(frameDone)
	}
}

// body answers a non-streaming request with a complete body, applying the
// fault. endless is the start of the never-ending variant of the body; nil
// means the endpoint has none and a generic one is used.
func (ex *exchange) body(contentType string, body []byte) {
	ex.bodyEndless(contentType, body, nil)
}

func (ex *exchange) bodyEndless(contentType string, body, endless []byte) {
	switch ex.fault.Kind {
	case KindErrorBody, KindStreamError, KindStreamErrorEvent:
		writeBody(ex.w, http.StatusOK, "application/json", errorPayload)
	case KindBadJSON, KindMalformed:
		writeBody(ex.w, http.StatusOK, "application/json", []byte("<html><body>upstream temporarily unavailable</body></html>\n"))
	case KindEndlessBody, KindEndlessFrame:
		if endless == nil {
			endless = []byte(`{"id":"endless","data":"`)
		}
		ex.w.Header().Set("Content-Type", contentType)
		ex.w.WriteHeader(http.StatusOK)
		ex.endless(endless)
	case KindShortBody:
		ex.short(contentType, body, len(body)+64)
	case KindCut:
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
