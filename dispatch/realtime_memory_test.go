package dispatch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// rtEcho is a realtime upstream that opens with session.created, then
// sends every event back as it came.
func rtEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		if c.Write(ctx, websocket.MessageText, []byte(`{"type":"session.created","session":{"type":"realtime"}}`)) != nil {
			return
		}
		for {
			typ, b, err := c.Read(ctx)
			if err != nil || c.Write(ctx, typ, b) != nil {
				return
			}
		}
	})
}

// bareRelay is the floor a realtime gateway is measured against (as
// hopbench's realtime row): it dials the same path on upstream and
// copies every message both ways, a goroutine per direction, nothing
// else.
func bareRelay(upstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up, _, err := websocket.Dial(r.Context(), upstream+r.URL.RequestURI(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.CloseNow()
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cancel()
			copyWS(ctx, c, up)
		}()
		copyWS(ctx, up, c)
		cancel()
		<-done
	})
}

func copyWS(ctx context.Context, dst, src *websocket.Conn) {
	for {
		typ, b, err := src.Read(ctx)
		if err != nil || dst.Write(ctx, typ, b) != nil {
			return
		}
	}
}

// An idle realtime session holds no more goroutine stack than a bare
// relay's: two goroutines, the handler's parked shallow enough (the walk
// returned at the commit, the relay runs from StartRealtime's caller) for
// the runtime to halve its stack to the relay's size. Three goroutines,
// or a handler parked under the walk, hold 8 KiB or more per session
// above the relay (docs/performance.md, memory per idle realtime
// session). Measured in this process against the same echo upstream,
// after enough garbage collections for every stack to reach its floor.
func TestRealtimeIdleSessionStacks(t *testing.T) {
	if raceEnabled {
		t.Skip("frame sizes under the race detector are not the shipped ones; make test runs this test without -race")
	}
	echo := httptest.NewServer(rtEcho())
	defer echo.Close()
	relay := httptest.NewServer(bareRelay(echo.URL))
	defer relay.Close()
	yml := strings.NewReplacer(`"A"`, `"gpt-realtime"`, `"B"`, `"gpt-realtime"`).Replace(rtConfig)
	g := gwtest.NewWith(t, gwtest.Options{Logger: quiet, URLs: map[string]string{"eu": echo.URL + "/v1"}}, yml, "us")
	const n = 64
	perSession := func(url string) (stack, peak, goroutines float64) {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
		defer cancel()
		open := func() *websocket.Conn {
			c, _, err := websocket.Dial(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), "session.created") {
				t.Fatalf("first event %q, %v", b, err)
			}
			// One event there and back: the session is relaying, its
			// handler past the walk.
			ev := []byte(`{"type":"input_audio_buffer.append","audio":""}`)
			if err := c.Write(ctx, websocket.MessageText, ev); err != nil {
				t.Fatal(err)
			}
			if _, b, err := c.Read(ctx); err != nil || string(b) != string(ev) {
				t.Fatalf("echo %q, %v", b, err)
			}
			return c
		}
		_ = open().Close(websocket.StatusNormalClosure, "") // first-use allocations
		var before, after runtime.MemStats
		settle := func(m *runtime.MemStats) int {
			for range 8 { // a collection halves a stack at most once
				runtime.Gosched()
				runtime.GC()
			}
			runtime.ReadMemStats(m)
			return runtime.NumGoroutine()
		}
		g0 := settle(&before)
		// No collection while the sessions open: a stack that grew during
		// the way in still holds what it grew to (only a collection
		// shrinks it), as the process's memory did before the stack was
		// given back.
		gc := debug.SetGCPercent(-1)
		cs := make([]*websocket.Conn, n)
		for i := range cs {
			cs[i] = open()
		}
		var grown runtime.MemStats
		runtime.ReadMemStats(&grown)
		debug.SetGCPercent(gc)
		g1 := settle(&after)
		for _, c := range cs {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
		return float64(after.StackInuse-before.StackInuse) / n, float64(grown.StackInuse-before.StackInuse) / n, float64(g1-g0) / n
	}
	ended := g.SpanEnds("dispatch voice")
	hopgate := func() (float64, float64, float64) {
		st, pk, gs := perSession(strings.Replace(g.URL, "http", "ws", 1) + "/v1/realtime?model=voice")
		for range n + 1 {
			testkit.Recv(t, ended, "a session's end")
		}
		return st, pk, gs
	}
	hopgate() // a first round: the process's first sessions grow what later ones reuse
	relayStack, relayPeak, relayG := perSession(strings.Replace(relay.URL, "http", "ws", 1) + "/v1/realtime?model=gpt-realtime")
	hgStack, hgPeak, hgG := hopgate()
	t.Logf("per idle session, upstream included: hopgate %.2f goroutines, %.1f KiB of stacks (%.1f KiB before a collection); bare relay %.2f, %.1f KiB (%.1f KiB)",
		hgG, hgStack/1024, hgPeak/1024, relayG, relayStack/1024, relayPeak/1024)
	// The way in (checks, walk, dial, upgrade) runs on a goroutine that
	// ends at the commit (api's openRealtime): run on the handler's, it
	// grows the handler to 16 KiB, which a collection halves later but
	// the process's memory has already paid for.
	if hgPeak > relayPeak+1024 {
		t.Errorf("hopgate's sessions held %.1f KiB of goroutine stacks each before a collection, the bare relay's %.1f", hgPeak/1024, relayPeak/1024)
	}
	if hgG > relayG+0.1 {
		t.Errorf("hopgate holds %.2f goroutines per idle session, the bare relay %.2f", hgG, relayG)
	}
	if hgStack > relayStack+1024 {
		t.Errorf("hopgate holds %.1f KiB of goroutine stacks per idle session, the bare relay %.1f", hgStack/1024, relayStack/1024)
	}
}
