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
//	/s503/v1/chat/completions   503 with an OpenAI error body (a failed hop)
//	/stall/v1/chat/completions  role + first content frame, then silence until the client leaves
//	/_stats                     request counts per behaviour (JSON)
type fastUpstream struct {
	completion []byte   // the non-streaming answer, about 1 KB
	frames     [][]byte // role, StreamFrames content frames, finish, [DONE]
	clen       string   // Content-Length of completion
	err503     []byte
	bufs       sync.Pool
	hits       struct{ ok, stream, s503, stall atomic.Int64 }
}

// upstreamStats is what /_stats reports.
type upstreamStats struct {
	OK     int64 `json:"ok"`
	Stream int64 `json:"stream"`
	S503   int64 `json:"s503"`
	Stall  int64 `json:"stall"`
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
	case stream:
		u.hits.stream.Add(1)
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for _, f := range u.frames {
			if _, err := w.Write(f); err != nil {
				return
			}
			_ = rc.Flush() // one write per frame, like a provider generating tokens
		}
	default:
		u.hits.ok.Add(1)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", u.clen)
		_, _ = w.Write(u.completion)
	}
}

func (u *fastUpstream) stats() upstreamStats {
	return upstreamStats{OK: u.hits.ok.Load(), Stream: u.hits.stream.Load(), S503: u.hits.s503.Load(), Stall: u.hits.stall.Load()}
}
