package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// StreamFrames is the number of content frames in a streamed answer.
const StreamFrames = 50

// fastUpstream is an OpenAI-compatible provider that does as little as
// possible: every answer is precomputed, so the harness measures the
// gateways, not the fake. cmd/fakeupstream is the feature-rich fake; it is
// measured once per run as a calibration row to show why this one exists.
//
// Paths select behaviour, so a gateway channel picks it with its base_url:
//
//	/v1/chat/completions        1 KB completion, or a 50-frame stream when the body says "stream":true
//	                            (written all at once when the body carries burstMarker)
//	/s503/v1/chat/completions   503 with an OpenAI error body (a failed hop)
//	/stall/v1/chat/completions  role + first content frame, then silence until the client leaves
//	/v1/messages                Anthropic Messages: the same text as a message, or as an
//	                            SSE stream of StreamFrames text deltas when "stream":true
//	/v1/responses               the Responses API: the bytes the translating path makes of
//	                            /v1/messages' answer (responses_upstream.go)
//	/_stats                     request counts per behaviour (JSON)
//
// The upstream role serves the same handler over TLS too (tls.go): the
// counters of each TLS listener say how many connections (handshakes) its
// clients opened and over which protocol their requests came.
type fastUpstream struct {
	completion []byte   // the non-streaming answer, about 1 KB
	frames     [][]byte // role, StreamFrames content frames, finish, [DONE]
	clen       string   // Content-Length of completion
	message    []byte   // the Anthropic non-streaming answer: completion's text
	mlen       string
	events     [][]byte // the Anthropic stream: head, StreamFrames text deltas, tail
	respFrames [][]byte // the Responses stream the translating path makes of events (responses_upstream.go)
	respObject []byte   // the Responses object it makes of message
	rlen       string
	err503     []byte
	bufs       sync.Pool
	burst      []byte // frames, concatenated: the burst stream
	hits       struct{ ok, stream, burst, s503, stall, messages, messagesStream, responses atomic.Int64 }
	tls        struct{ h1, h2 tlsCounters }
}

// tlsCounters count what reached one TLS listener.
type tlsCounters struct{ conns, http1, http2 atomic.Int64 }

func (c *tlsCounters) stats() tlsStats {
	return tlsStats{Conns: c.conns.Load(), HTTP1: c.http1.Load(), HTTP2: c.http2.Load()}
}

// upstreamStats is what /_stats reports.
type upstreamStats struct {
	OK             int64    `json:"ok"`
	Stream         int64    `json:"stream"`
	Burst          int64    `json:"burst"`
	S503           int64    `json:"s503"`
	Stall          int64    `json:"stall"`
	Messages       int64    `json:"messages"`
	MessagesStream int64    `json:"messages_stream"`
	Responses      int64    `json:"responses"`
	TLSH1          tlsStats `json:"tls_h1"` // the listener offering HTTP/1.1 only
	TLSH2          tlsStats `json:"tls_h2"` // the listener offering HTTP/2 and HTTP/1.1
}

// tlsStats: connections accepted (each one a full handshake: hopgate's
// transport keeps no session cache) and requests by protocol.
type tlsStats struct {
	Conns int64 `json:"conns"`
	HTTP1 int64 `json:"http1"`
	HTTP2 int64 `json:"http2"`
}

func (a tlsStats) sub(b tlsStats) tlsStats {
	return tlsStats{Conns: a.Conns - b.Conns, HTTP1: a.HTTP1 - b.HTTP1, HTTP2: a.HTTP2 - b.HTTP2}
}

// counting serves u, counting requests by protocol in c.
func (u *fastUpstream) counting(c *tlsCounters) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			c.http2.Add(1)
		} else {
			c.http1.Add(1)
		}
		u.ServeHTTP(w, r)
	})
}

func newFastUpstream() *fastUpstream {
	u := &fastUpstream{bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }}}
	// A realistic completion: OpenAI's shape, usage included, padded to ~1 KB.
	content := strings.Repeat("lorem ipsum dolor sit amet ", 30)[:800]
	u.completion = fmt.Appendf(nil, `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,`+
		`"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":%q},`+
		`"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":200,"total_tokens":224}}`, content)
	chunk := func(delta, finish string) []byte {
		return fmt.Appendf(nil, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,`+
			`"model":"bench","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	u.clen = strconv.Itoa(len(u.completion))
	u.frames = append(u.frames, chunk(`{"role":"assistant","content":""}`, "null"))
	for i := 1; i <= StreamFrames; i++ {
		u.frames = append(u.frames, chunk(fmt.Sprintf(`{"content":"tok%d "}`, i), "null"))
	}
	u.frames = append(u.frames, chunk(`{}`, `"stop"`), []byte("data: [DONE]\n\n"))
	u.burst = bytes.Join(u.frames, nil)
	u.message = fmt.Appendf(nil, `{"id":"msg_bench","type":"message","role":"assistant","model":"bench",`+
		`"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,`+
		`"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":200}}`, content)
	u.mlen = strconv.Itoa(len(u.message))
	u.events = anthropicEvents()
	var err error
	if u.respFrames, u.respObject, err = responsesAnswers(u.events, u.message); err != nil {
		panic("hopbench: the Responses answers: " + err.Error())
	}
	u.rlen = strconv.Itoa(len(u.respObject))
	u.err503 = []byte(`{"error":{"message":"The server is overloaded. Please retry.","type":"server_error","param":null,"code":"overloaded"}}`)
	return u
}

func (u *fastUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "/_stats" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(u.stats())
		return
	}
	buf := u.bufs.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := io.Copy(buf, r.Body)
	stream := bytes.Contains(buf.Bytes(), []byte(`"stream":true`)) || bytes.Contains(buf.Bytes(), []byte(`"stream": true`))
	burst := stream && bytes.Contains(buf.Bytes(), []byte(burstMarker))
	u.bufs.Put(buf)
	if err != nil {
		return // the client left mid-body
	}
	h := w.Header()
	switch {
	case strings.HasPrefix(path, "/s503/"):
		u.hits.s503.Add(1)
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(u.err503)
	case strings.HasPrefix(path, "/stall/"):
		u.hits.stall.Add(1)
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for _, f := range u.frames[:2] {
			_, _ = w.Write(f)
		}
		_ = rc.Flush()
		<-r.Context().Done()
	case strings.HasSuffix(path, "/v1/messages") && stream:
		u.hits.messagesStream.Add(1)
		writeStream(w, u.events)
	case strings.HasSuffix(path, "/v1/responses") && stream:
		u.hits.responses.Add(1)
		writeStream(w, u.respFrames)
	case strings.HasSuffix(path, "/v1/responses"):
		u.hits.responses.Add(1)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", u.rlen)
		_, _ = w.Write(u.respObject)
	case strings.HasSuffix(path, "/v1/messages"):
		u.hits.messages.Add(1)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", u.mlen)
		_, _ = w.Write(u.message)
	case burst:
		u.hits.burst.Add(1)
		writeBurst(w, u.burst)
	case stream:
		u.hits.stream.Add(1)
		writeStream(w, u.frames)
	default:
		u.hits.ok.Add(1)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", u.clen)
		_, _ = w.Write(u.completion)
	}
}

// writeStream writes an SSE answer, one write and flush per frame, like a
// provider generating tokens.
func writeStream(w http.ResponseWriter, frames [][]byte) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// writeBurst writes a whole SSE answer in one write and one flush.
func writeBurst(w http.ResponseWriter, stream []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if _, err := w.Write(stream); err == nil {
		_ = http.NewResponseController(w).Flush()
	}
}

// anthropicEvents is the Anthropic Messages stream of the OpenAI stream's
// text, as the API sends it: message_start, content_block_start, ping,
// StreamFrames text deltas ("tok1 ", …), content_block_stop, message_delta
// (stop reason, usage), message_stop. Translated for an OpenAI client it is
// the pass-through stream's length: a role chunk, StreamFrames content
// chunks, a finish chunk and [DONE].
func anthropicEvents() [][]byte {
	ev := func(name, data string) []byte { return []byte("event: " + name + "\ndata: " + data + "\n\n") }
	out := [][]byte{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench",`+
			`"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":24,"cache_creation_input_tokens":0,`+
			`"cache_read_input_tokens":0,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type":"ping"}`),
	}
	for i := 1; i <= StreamFrames; i++ {
		out = append(out, ev("content_block_delta",
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok%d "}}`, i)))
	}
	return append(out,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},`+
			`"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`+
			strconv.Itoa(2*StreamFrames)+`}}`),
		ev("message_stop", `{"type":"message_stop"}`))
}

func (u *fastUpstream) stats() upstreamStats {
	return upstreamStats{OK: u.hits.ok.Load(), Stream: u.hits.stream.Load(), Burst: u.hits.burst.Load(), S503: u.hits.s503.Load(), Stall: u.hits.stall.Load(),
		Messages: u.hits.messages.Load(), MessagesStream: u.hits.messagesStream.Load(), Responses: u.hits.responses.Load(),
		TLSH1: u.tls.h1.stats(), TLSH2: u.tls.h2.stats()}
}
