package telemetry

import (
	"context"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// gatedExporter holds every export until open is closed, as an exporter
// does while its collector is slow, and keeps what it was given.
type gatedExporter struct {
	open chan struct{}
	mu   sync.Mutex
	got  int
}

func newGatedExporter() *gatedExporter { return &gatedExporter{open: make(chan struct{})} }

func (e *gatedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-e.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	e.got += len(spans)
	e.mu.Unlock()
	return nil
}

func (e *gatedExporter) Shutdown(context.Context) error { return nil }

func (e *gatedExporter) exported() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got
}

// While the exporter is stuck, the queue takes max spans (including the
// batch being exported) and drops and counts the rest; once the exporter
// catches up there is room again. Every span the queue took is exported:
// the batch processor behind it never drops on its own.
func TestExportQueueBoundsWhatWaits(t *testing.T) {
	exp := newGatedExporter()
	q := newExportQueue(exp, 8, sdktrace.WithMaxExportBatchSize(2))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	defer tp.Shutdown(context.Background())
	end := func(n int) {
		for range n {
			_, s := tp.Tracer("t").Start(context.Background(), "s")
			s.End()
		}
	}

	end(13) // the exporter holds the first batch; 8 wait in all
	if got := q.dropped.Load(); got != 5 {
		t.Fatalf("dropped %d of 13 with room for 8, want 5", got)
	}
	if got := q.pending.Load(); got != 8 {
		t.Fatalf("pending %d, want 8", got)
	}
	close(exp.open)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, p := exp.exported(), q.pending.Load(); got != 8 || p != 0 {
		t.Fatalf("after the flush: exported %d, pending %d; want 8 and 0", got, p)
	}

	end(3) // room again
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, d := exp.exported(), q.dropped.Load(); got != 11 || d != 5 {
		t.Fatalf("exported %d, dropped %d; want 11 and 5", got, d)
	}
}

// Through Setup: OTEL_BSP_MAX_QUEUE_SIZE sizes the queue (the variable the
// SDK's batch processor reads, so an operator's setting keeps its meaning),
// and what does not fit is on /metrics.
func TestSetupExportQueueFromEnv(t *testing.T) {
	exp := newGatedExporter()
	tel, err := Setup(context.Background(), Options{HealthyRatio: 1, SpanExporter: exp,
		Getenv: envOf(map[string]string{envBSPMaxQueueSize: "2"})})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, root := tel.Tracer.Start(context.Background(), SpanServer)
		root.SetAttributes(healthyAttrs...)
		root.End()
	}
	body := scrape(t, tel, "")
	if want := `hopgate_trace_decisions_total{decision="dropped_queue_full",region=""} 1`; !strings.Contains(body, want) {
		t.Errorf("scrape lacks %s:\n%s", want, grep(body, "hopgate_trace_decisions"))
	}
	close(exp.open)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.exported(); got != 2 {
		t.Fatalf("exported %d spans, want the 2 that fit", got)
	}
}

func TestExportQueueSize(t *testing.T) {
	for _, tc := range []struct {
		why, v  string
		want    int
		wantErr bool
	}{
		{"unset: hopgate's default, 8× the SDK's", "", defaultExportQueue, false},
		{"the operator's setting holds", "4096", 4096, false},
		{"zero would drop every span", "0", 0, true},
		{"negative", "-1", 0, true},
		{"not a number: refused, not silently the default", "lots", 0, true},
	} {
		got, err := exportQueueSize(envOf(map[string]string{envBSPMaxQueueSize: tc.v}))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: %q gave %d, %v; want %d (error %v)", tc.why, tc.v, got, err, tc.want, tc.wantErr)
		}
	}
}
