package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// consoleExporter writes one JSON object per span (OTEL_TRACES_EXPORTER=
// console): enough to read a trace locally without a backend, and without
// pulling in stdouttrace for a debugging aid.
type consoleExporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

var _ sdktrace.SpanExporter = (*consoleExporter)(nil)

func newConsoleExporter(w io.Writer) *consoleExporter {
	return &consoleExporter{enc: json.NewEncoder(w)}
}

type consoleSpan struct {
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	TraceID    string            `json:"trace_id"`
	SpanID     string            `json:"span_id"`
	ParentID   string            `json:"parent_span_id,omitempty"`
	Start      time.Time         `json:"start"`
	DurationMS float64           `json:"duration_ms"`
	Status     string            `json:"status"`
	StatusMsg  string            `json:"status_message,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

func (e *consoleExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		if err := ctx.Err(); err != nil {
			return err
		}
		cs := consoleSpan{
			Name:       s.Name(),
			Kind:       s.SpanKind().String(),
			TraceID:    s.SpanContext().TraceID().String(),
			SpanID:     s.SpanContext().SpanID().String(),
			Start:      s.StartTime(),
			DurationMS: float64(s.EndTime().Sub(s.StartTime())) / float64(time.Millisecond),
			Status:     s.Status().Code.String(),
			StatusMsg:  s.Status().Description,
		}
		if p := s.Parent(); p.IsValid() {
			cs.ParentID = p.SpanID().String()
		}
		if attrs := s.Attributes(); len(attrs) > 0 {
			cs.Attributes = make(map[string]string, len(attrs))
			for _, kv := range attrs {
				cs.Attributes[string(kv.Key)] = kv.Value.Emit()
			}
		}
		if err := e.enc.Encode(cs); err != nil {
			return err
		}
	}
	return nil
}

func (*consoleExporter) Shutdown(context.Context) error { return nil }
