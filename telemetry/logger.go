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
//
// Its lines may also be written by Lines (logline.go), which formats them
// the same without a slog.Record; both write through one lock.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	lw := &lockedWriter{w: w}
	return slog.New(traceHandler{
		Handler: slog.NewJSONHandler(lw, &slog.HandlerOptions{Level: level}),
		direct:  &directLines{w: lw, level: level},
	})
}

// traceHandler adds the trace ids at Handle time, when the context is known.
// Under WithGroup the ids land inside the group, as any attribute would.
// direct is set on NewLogger's own handler only: one derived with
// WithAttrs or WithGroup writes what Lines does not (its attributes, its
// group).
type traceHandler struct {
	slog.Handler
	direct *directLines
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{Handler: h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{Handler: h.Handler.WithGroup(name)}
}
