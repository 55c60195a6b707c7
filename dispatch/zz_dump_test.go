package dispatch_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func dumpSpans(t *testing.T, h *harness) string {
	_ = h.tel.TracerProvider.ForceFlush(context.Background())
	ss := h.spans.GetSpans()
	byParent := map[string][]tracetest.SpanStub{}
	ids := map[string]bool{}
	for _, s := range ss {
		ids[s.SpanContext.SpanID().String()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range ss {
		p := s.Parent.SpanID().String()
		if !ids[p] {
			roots = append(roots, s)
		} else {
			byParent[p] = append(byParent[p], s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, d int)
	walk = func(s tracetest.SpanStub, d int) {
		var kv []string
		for _, a := range s.Attributes {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		sort.Strings(kv)
		fmt.Fprintf(&b, "%s%s [%s] status=%v:%q tid=%s\n", strings.Repeat("  ", d), s.Name, s.SpanKind, s.Status.Code, s.Status.Description, s.SpanContext.TraceID())
		for _, k := range kv {
			fmt.Fprintf(&b, "%s    %s\n", strings.Repeat("  ", d), k)
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s    EVENT %s %v\n", strings.Repeat("  ", d), e.Name, e.Attributes)
		}
		kids := byParent[s.SpanContext.SpanID().String()]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime.Before(kids[j].StartTime) })
		for _, k := range kids {
			walk(k, d+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func TestZZDump(t *testing.T) {
	t.Run("skip", func(t *testing.T) {
		h := newHarness(t, twoChannels("m", "m", ""), "a", "b")
		h.ups["a"].SetFault("m", "503")
		for i := 0; i < 3; i++ {
			h.post(chat(false))
		}
		h.spans.Reset()
		r := h.post(chat(true))
		t.Logf("%d %v\n%s", r.status, r.header, dumpSpans(t, h))
		for _, l := range h.ups["b"].Log() {
			t.Logf("tp %s", l.Header.Get("Traceparent"))
		}
	})
	t.Run("cut", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|cut=3", "m", ""), "a", "b")
		r := h.post(chat(true))
		t.Logf("%d %v %s\n%s", r.status, r.header, r.body, dumpSpans(t, h))
	})
	t.Run("deadline", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|no-headers", "m", "    policy: {chain_deadline: 5s}\n"), "a", "b")
		done := h.async(chat(true))
		h.waitAttempts("a", "m|no-headers", 1)
		h.waitTimers(2)
		h.clock.Advance(5 * time.Second)
		r := <-done
		t.Logf("%d %v %s\n%s", r.status, r.header, r.body, dumpSpans(t, h))
	})
	t.Run("gatetimeout", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|slow-first-token=60s", "m", "    policy: {stream_gate: {timeout: 30s, on_timeout: commit}}\n"), "a", "b")
		done := h.async(chat(true))
		h.waitAttempts("a", "m|slow-first-token=60s", 1)
		h.waitTimers(1)
		h.clock.Advance(30 * time.Second)
		time.Sleep(100 * time.Millisecond)
		h.upClock.Advance(60 * time.Second)
		r := <-done
		t.Logf("%d %v %s\n%s", r.status, r.header, r.body, dumpSpans(t, h))
	})
}
