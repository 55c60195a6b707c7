package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestFailoverLogRing(t *testing.T) {
	entry := func(i int) FailoverEntry { return FailoverEntry{Model: strconv.Itoa(i)} }
	models := func(es []FailoverEntry) string {
		var b bytes.Buffer
		for _, e := range es {
			b.WriteString(e.Model)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name string // why
		size int
		adds int
		want string
	}{
		{"empty log lists nothing (not nil-panics)", 3, 0, ""},
		{"partial fill, newest first", 3, 2, "10"},
		{"exactly full", 3, 3, "210"},
		{"wrapped: oldest evicted", 3, 5, "432"},
		{"wrapped twice", 3, 7, "654"},
		{"default size when n <= 0", 0, 1, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewFailoverLog(tc.size)
			for i := range tc.adds {
				l.Add(entry(i))
			}
			if got := models(l.List()); got != tc.want {
				t.Fatalf("List = %q, want %q", got, tc.want)
			}
		})
	}
}

// The log is written on the request path during an incident: Add must not
// allocate, and concurrent Add/List must be race-free.
func TestFailoverLogNoAllocConcurrent(t *testing.T) {
	l := NewFailoverLog(16)
	e := FailoverEntry{Model: "m", Path: "a:503 -> b:ok"}
	if n := testing.AllocsPerRun(100, func() { l.Add(e) }); n != 0 {
		t.Fatalf("Add allocates %v times", n)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				l.Add(e)
				if len(l.List()) > 16 {
					t.Error("list longer than the ring")
				}
			}
		})
	}
	wg.Wait()
}

// Logs carry trace_id so a log line leads to its trace (DESIGN.md §5).
func TestLoggerAddsTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo).With("component", "test")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xab, 15: 1}, SpanID: trace.SpanID{0xcd, 7: 2}, TraceFlags: trace.FlagsSampled})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "hop failed", "channel", "a")
	log.Info("no context")
	log.DebugContext(trace.ContextWithSpanContext(context.Background(), sc), "below level")

	dec := json.NewDecoder(&buf)
	var withCtx, without map[string]any
	if err := dec.Decode(&withCtx); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&without); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("debug record logged at info level")
	}
	if withCtx[LogTraceID] != sc.TraceID().String() || withCtx[LogSpanID] != sc.SpanID().String() || withCtx["component"] != "test" {
		t.Fatalf("record %v lacks trace ids", withCtx)
	}
	if _, ok := without[LogTraceID]; ok {
		t.Fatalf("record without span got trace_id: %v", without)
	}
}

// BenchmarkLogLine is the access log line (api's logRequest attributes)
// through NewLogger with a span in the context, as every request writes it.
func BenchmarkLogLine(b *testing.B) {
	log := NewLogger(io.Discard, slog.LevelInfo)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	b.ReportAllocs()
	for b.Loop() {
		log.LogAttrs(ctx, slog.LevelInfo, "request",
			slog.String("method", "POST"), slog.String("path", "/v1/chat/completions"),
			slog.String("model", "m"), slog.String("served_model", "m"),
			slog.Bool("stream", true), slog.Int("status", 200),
			slog.String("outcome", "ok"), slog.String("failover_path", "a"),
			slog.Int("attempts", 1), slog.String("tenant", "t"),
			slog.Bool("aborted", false))
	}
}

func TestFormatPath(t *testing.T) {
	for _, tc := range []struct {
		name  string // why
		steps []Step
		want  string
	}{
		{"no steps: empty attribute, not a dangling arrow", nil, ""},
		{"single hop has no arrow (healthy per Interesting)", []Step{{"a", "ok"}}, "a:ok"},
		{"the DESIGN.md example", []Step{{"a", "open"}, {"b", "503"}, {"c", "ok"}}, "a:open -> b:503 -> c:ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatPath(tc.steps); got != tc.want {
				t.Fatalf("FormatPath = %q, want %q", got, tc.want)
			}
		})
	}
	steps := []Step{{"a", "open"}, {"b", "503"}, {"c", "ok"}}
	if n := testing.AllocsPerRun(100, func() { _ = FormatPath(steps) }); n > 1 {
		t.Fatalf("FormatPath allocates %v times, want 1", n)
	}
}

func BenchmarkFormatPath(b *testing.B) {
	steps := []Step{{"openai-eu", "open"}, {"backup-us", "503"}, {"azure", "ok"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = FormatPath(steps)
	}
}
