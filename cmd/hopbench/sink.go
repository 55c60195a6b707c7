package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
)

// otlpSink stands in for a collector: it accepts OTLP/HTTP protobuf trace
// exports, counts bytes and spans, and answers an empty success. Counting
// spans lets the report say whether export kept up (spans per request),
// instead of assuming it.
type otlpSink struct {
	bytes, exports, spans, bad atomic.Int64
	bufs                       sync.Pool
}

func newOTLPSink() *otlpSink {
	return &otlpSink{bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }}}
}

// sinkStats is a snapshot of the sink's counters.
type sinkStats struct{ Bytes, Exports, Spans, Bad int64 }

func (s *otlpSink) snapshot() sinkStats {
	return sinkStats{s.bytes.Load(), s.exports.Load(), s.spans.Load(), s.bad.Load()}
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	buf := s.bufs.Get().(*bytes.Buffer)
	defer s.bufs.Put(buf)
	buf.Reset()
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.bad.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	n, err := io.Copy(buf, body)
	if err != nil {
		s.bad.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans, ok := countSpans(buf.Bytes())
	if !ok {
		s.bad.Add(1)
	}
	s.bytes.Add(n)
	s.exports.Add(1)
	s.spans.Add(int64(spans))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse: full success
}

// countSpans counts the spans of an ExportTraceServiceRequest without
// decoding them: resource_spans (1) → scope_spans (2) → spans (2).
func countSpans(b []byte) (int, bool) {
	total := 0
	ok := eachField(b, 1, func(rs []byte) bool {
		return eachField(rs, 2, func(ss []byte) bool {
			return eachField(ss, 2, func([]byte) bool { total++; return true })
		})
	})
	return total, ok
}

// eachField calls fn with every length-delimited field number num of the
// message b, skipping the others. It reports false on malformed input.
func eachField(b []byte, num protowire.Number, fn func([]byte) bool) bool {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 || !fn(v) {
				return false
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return false
		}
		b = b[l:]
	}
	return true
}
