package sse

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// chatStream is a 50-frame OpenAI chat stream: role chunk, 47 content chunks,
// finish chunk, [DONE].
func chatStream() []byte {
	var b bytes.Buffer
	head := `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":`
	fmt.Fprintf(&b, "data: %s{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n", head)
	for i := range 47 {
		fmt.Fprintf(&b, "data: %s{\"content\":\" word%d\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n", head)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkReader measures the per-frame cost and proves steady-state
// framing allocates nothing (the reader is reused via Reset, as a pool would).
func BenchmarkReader(b *testing.B) {
	stream := chatStream()
	src := bytes.NewReader(stream)
	rd := NewReader(src, 0)
	frames := 0
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(stream)
		rd.Reset(src)
		for {
			_, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			frames++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
}

// Multi-line data and event names go through the join buffer and the intern
// cache; both must be allocation-free once warm.
func BenchmarkReaderResponsesEvents(b *testing.B) {
	var s bytes.Buffer
	for i := range 50 {
		fmt.Fprintf(&s, "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\r\ndata: \"delta\":\"w%d\"}\r\n\r\n", i)
	}
	stream := s.Bytes()
	src := bytes.NewReader(stream)
	rd := NewReader(src, 0)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(stream)
		rd.Reset(src)
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	}
}
