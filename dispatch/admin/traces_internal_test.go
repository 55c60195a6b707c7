package admin

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/telemetry"
)

// TestWaterfallOrdersByStart: the ring holds spans in the order they
// ended (a stream's hop after its sibling, a late span after the root),
// but the waterfall reads top-down in the order things started, each
// child under its parent.
func TestWaterfallOrdersByStart(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	id := func(b byte) trace.SpanID { return trace.SpanID{b} }
	rec := &telemetry.TraceRecord{Spans: []telemetry.SpanRecord{
		{Name: "chat b", Kind: "client", SpanID: id(4), ParentID: id(2), Start: at(100), End: at(150)},
		{Name: telemetry.SpanDispatch + " m", Kind: "internal", SpanID: id(2), ParentID: id(1), Start: at(5), End: at(310)},
		{Name: telemetry.SpanServer, Kind: "server", SpanID: id(1), Start: at(0), End: at(320)},
		{Name: "chat a", Kind: "client", SpanID: id(3), ParentID: id(2), Start: at(10), End: at(330)}, // late
	}}
	rows, start, total := waterfall(rec)
	if !start.Equal(t0) || total != 330*time.Millisecond {
		t.Fatalf("start %v, total %v", start, total)
	}
	want := []struct {
		name  string
		depth int
	}{{telemetry.SpanServer, 0}, {telemetry.SpanDispatch + " m", 1}, {"chat a", 2}, {"chat b", 2}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if rows[i].Name != w.name || rows[i].Depth != w.depth {
			t.Errorf("row %d = %s at depth %d, want %s at %d", i, rows[i].Name, rows[i].Depth, w.name, w.depth)
		}
	}
}
