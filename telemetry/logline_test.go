package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// lineAttr is one attribute of a test line, as Lines and as slog take it.
type lineAttr struct {
	k    string
	kind byte // 's', 'i', 'b'
	s    string
	i    int
	b    bool
}

func (a lineAttr) slog() slog.Attr {
	switch a.kind {
	case 'i':
		return slog.Int(a.k, a.i)
	case 'b':
		return slog.Bool(a.k, a.b)
	}
	return slog.String(a.k, a.s)
}

func (a lineAttr) add(ln *Line) {
	switch a.kind {
	case 'i':
		ln.Int(a.k, a.i)
	case 'b':
		ln.Bool(a.k, a.b)
	default:
		ln.Str(a.k, a.s)
	}
}

// bothWays writes one line through Lines and the same record through
// slog's handler of the same NewLogger, at time at, and returns the two.
func bothWays(t testing.TB, ctx context.Context, level, min slog.Level, at time.Time, msg string, attrs []lineAttr) (direct, viaSlog string) {
	t.Helper()
	var buf bytes.Buffer
	log := NewLogger(&buf, min)
	ls := NewLines(log)
	if ls.direct == nil {
		t.Fatal("NewLogger's logger has no direct line writer")
	}
	ls.now = func() time.Time { return at }
	ln := ls.Start(ctx, level, msg)
	for _, a := range attrs {
		a.add(ln)
	}
	ln.End()
	direct = buf.String()
	buf.Reset()
	if log.Enabled(ctx, level) {
		r := slog.NewRecord(at, level, msg, 0)
		for _, a := range attrs {
			r.AddAttrs(a.slog())
		}
		if err := log.Handler().Handle(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	return direct, buf.String()
}

func spanCtx() context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

func TestLinesMatchSlog(t *testing.T) {
	at := time.Date(2026, 12, 2, 18, 4, 5, 123456789, time.UTC)
	request := []lineAttr{
		{k: "method", s: "POST"}, {k: "path", s: "/v1/chat/completions"},
		{k: "model", s: "gpt-4o"}, {k: "served_model", s: "gpt-4o"},
		{k: "stream", kind: 'b', b: true}, {k: "status", kind: 'i', i: 200},
		{k: "outcome", s: "ok"}, {k: "failover_path", s: "azure-eu:skip(open) → openai:ok"},
		{k: "attempts", kind: 'i', i: 2}, {k: "tenant", s: ""}, {k: "aborted", kind: 'b'},
	}
	cases := []struct {
		name       string
		ctx        context.Context
		level, min slog.Level
		at         time.Time
		msg        string
		attrs      []lineAttr
	}{
		{"the access line with trace ids", spanCtx(), slog.LevelInfo, slog.LevelInfo, at, "request", request},
		{"no span", context.Background(), slog.LevelInfo, slog.LevelInfo, at, "request", request},
		{"no attributes", spanCtx(), slog.LevelWarn, slog.LevelInfo, at, "x", nil},
		{"levels", context.Background(), slog.LevelError + 2, slog.LevelDebug, at, "m", request[:2]},
		{"below the level", context.Background(), slog.LevelDebug, slog.LevelInfo, at, "m", request},
		{"a zone and whole seconds", context.Background(), slog.LevelInfo, slog.LevelInfo,
			time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -(3*3600+30*60))), "m", request[:1]},
		{"escapes", context.Background(), slog.LevelInfo, slog.LevelInfo, at, "a \"quoted\" \\ msg\n\t\r\x00\x1f\x7f",
			[]lineAttr{
				{k: "html", s: "<b>&amp;</b>"}, {k: "ctl", s: "\x01\x08\x0b\x0c\x1b"},
				{k: "utf8", s: "café → 東京 🚀"}, {k: "bad", s: "a\xffb\xc3\x28c\xed\xa0\x80"},
				{k: "sep", s: "x\u2028y\u2029z"}, {k: "k\"ey\n", s: "v"},
				{k: "neg", kind: 'i', i: -9223372036854775808}, {k: "", s: "empty key"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, s := bothWays(t, tc.ctx, tc.level, tc.min, tc.at, tc.msg, tc.attrs)
			if d != s {
				t.Fatalf("lines differ\nLines: %q\nslog:  %q", d, s)
			}
			if tc.level >= tc.min && !strings.HasSuffix(d, "}\n") {
				t.Fatalf("no line written: %q", d)
			}
		})
	}
}

// TestLinesThroughOtherLoggers: a logger that is not NewLogger's own, or
// is derived from it, gets its lines through slog, attributes and groups
// included.
func TestLinesThroughOtherLoggers(t *testing.T) {
	var buf bytes.Buffer
	for _, tc := range []struct {
		name string
		log  *slog.Logger
	}{
		{"with attributes", NewLogger(&buf, slog.LevelInfo).With("component", "api")},
		{"with a group", NewLogger(&buf, slog.LevelInfo).WithGroup("g")},
		{"a text handler", slog.New(slog.NewTextHandler(&buf, nil))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := NewLines(tc.log)
			if ls.direct != nil {
				t.Fatal("a derived or foreign logger must not be written directly")
			}
			buf.Reset()
			ls.Start(spanCtx(), slog.LevelInfo, "request").Str("model", "m").Int("status", 200).Bool("stream", true).End()
			got := buf.String()
			buf.Reset()
			tc.log.LogAttrs(spanCtx(), slog.LevelInfo, "request", slog.String("model", "m"), slog.Int("status", 200), slog.Bool("stream", true))
			want := buf.String()
			// The two lines' times differ; everything after them must not.
			if cut(got) != cut(want) || got == "" {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
		})
	}
	if ln := NewLines(slog.New(slog.NewTextHandler(&buf, nil))).Start(context.Background(), slog.LevelDebug, "x"); ln != nil {
		t.Fatal("a line below the logger's level was started")
	}
}

// cut drops a line's time.
func cut(line string) string {
	if i := strings.Index(line, "level"); i >= 0 {
		return line[i:]
	}
	return line
}

func FuzzLinesMatchSlog(f *testing.F) {
	f.Add("request", "model", "gpt-4o", 200, true)
	f.Add("a\nb", "k\"", "\xff\u2028<>&\x00", -1, false)
	f.Fuzz(func(t *testing.T, msg, k, v string, n int, b bool) {
		attrs := []lineAttr{{k: k, s: v}, {k: v, kind: 'i', i: n}, {k: "b", kind: 'b', b: b}, {k: "v", s: v + msg}}
		at := time.Unix(0, int64(n)&(1<<60-1)).UTC()
		d, s := bothWays(t, spanCtx(), slog.LevelInfo, slog.LevelInfo, at, msg, attrs)
		if d != s {
			t.Fatalf("lines differ\nLines: %q\nslog:  %q", d, s)
		}
	})
}

// BenchmarkAccessLine: the access line through Lines and through
// slog.Logger.LogAttrs on the same NewLogger, to a discarding writer.
func BenchmarkAccessLine(b *testing.B) {
	log := NewLogger(io.Discard, slog.LevelInfo)
	ctx := spanCtx()
	b.Run("lines", func(b *testing.B) {
		ls := NewLines(log)
		b.ReportAllocs()
		for b.Loop() {
			ls.Start(ctx, slog.LevelInfo, "request").Str("method", "POST").Str("path", "/v1/chat/completions").
				Str("model", "bench").Str("served_model", "bench").Bool("stream", true).Int("status", 200).
				Str("outcome", "ok").Str("failover_path", "bench-a:ok").Int("attempts", 1).Str("tenant", "").
				Bool("aborted", false).End()
		}
	})
	b.Run("slog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			log.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("method", "POST"), slog.String("path", "/v1/chat/completions"),
				slog.String("model", "bench"), slog.String("served_model", "bench"), slog.Bool("stream", true), slog.Int("status", 200),
				slog.String("outcome", "ok"), slog.String("failover_path", "bench-a:ok"), slog.Int("attempts", 1), slog.String("tenant", ""),
				slog.Bool("aborted", false))
		}
	})
}

// TestLinesAndSlogShareTheWriter: lines written through Lines and through
// the logger at once reach a writer that is not safe for concurrent use
// one whole line at a time (the race detector and the JSON of every line
// would show an interleaving).
func TestLinesAndSlogShareTheWriter(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo)
	ls := NewLines(log)
	var wg sync.WaitGroup
	const n = 200
	for g := range 4 {
		wg.Go(func() {
			for i := range n {
				if g%2 == 0 {
					ls.Start(spanCtx(), slog.LevelInfo, "request").Int("g", g).Int("i", i).Str("pad", strings.Repeat("x", 300)).End()
				} else {
					log.InfoContext(spanCtx(), "request", "g", g, "i", i, "pad", strings.Repeat("y", 300))
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 4*n {
		t.Fatalf("%d lines, want %d", len(lines), 4*n)
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
	}
}
