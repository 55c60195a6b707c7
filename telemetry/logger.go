package telemetry

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log keys linking a log line to its trace (DESIGN.md §5: logs carry trace_id).
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// NewLogger returns a JSON slog logger whose records logged with a context
// (InfoContext, ErrorContext, …) carry trace_id and span_id of the context's
// span. Records without a valid span context are logged unchanged.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(traceHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// traceHandler adds the trace ids at Handle time, when the context is known.
// Under WithGroup the ids land inside the group, as any attribute would.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
