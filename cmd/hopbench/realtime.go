package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The realtime row (issue 32): events relayed through an open realtime
// session (DESIGN.md §15), hopgate against a bare WebSocket relay, in the
// same run. The upstream is an echo: it opens with session.created and
// answers every client event with the same frame, so one event's round
// trip is two relayed frames and a session's throughput is bounded by the
// relays, not by a model.

// roleRTRelay is the bare relay: it accepts a WebSocket, dials the same
// path on the realtime upstream and copies every message both ways with
// the same library hopgate uses (github.com/coder/websocket), nothing
// else — no walk, no gate, no trace.
const roleRTRelay = "rtrelay"

// envRealtime is host:port of the upstream's realtime echo.
const envRealtime = "HOPBENCH_REALTIME"

// modelRealtime is the gateway's realtime model: one openai channel (rt)
// whose base URL is the echo.
const modelRealtime = "bench-realtime"

// Names of the realtime targets.
const (
	rtDirect  = "direct"
	rtRelay   = "relay"
	rtHopgate = "hopgate"
)

// rtEventBytes is the size of one benchmark event: an
// input_audio_buffer.append of 20 ms of 24 kHz PCM16 (960 bytes, 1 280 in
// base64), what a voice client sends fifty times a second.
var rtEvent = func() []byte {
	audio := base64.StdEncoding.EncodeToString(make([]byte, 960))
	return []byte(`{"type":"input_audio_buffer.append","audio":"` + audio + `"}`)
}()

// rtSessionCreated is the echo's first event: the gate's commit.
var rtSessionCreated = []byte(`{"type":"session.created","event_id":"evt_bench","session":{"id":"sess_bench","object":"realtime.session","model":"gpt-realtime"}}`)

// rtEcho is the realtime upstream: session.created, then every message
// back as it came.
func rtEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		if err := c.Write(ctx, websocket.MessageText, rtSessionCreated); err != nil {
			return
		}
		buf := make([]byte, 0, 4096)
		for {
			typ, rd, err := c.Reader(ctx)
			if err != nil {
				return
			}
			if buf, err = readAllInto(buf[:0], rd); err != nil {
				return
			}
			if err := c.Write(ctx, typ, buf); err != nil {
				return
			}
		}
	})
}

func readAllInto(buf []byte, r io.Reader) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// rtRelayHandler is roleRTRelay's handler: the floor a realtime gateway
// is measured against.
func rtRelayHandler(upstream string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up, _, err := websocket.Dial(r.Context(), "ws://"+upstream+r.URL.RequestURI(), &websocket.DialOptions{
			HTTPHeader:      http.Header{"Authorization": {"Bearer sk-channel-bench"}},
			CompressionMode: websocket.CompressionDisabled,
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer up.CloseNow()
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		up.SetReadLimit(-1)
		c.SetReadLimit(-1)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer cancel()
			pipeWS(ctx, c, up)
		}()
		pipeWS(ctx, up, c)
		cancel()
		<-done
	})
}

// pipeWS copies every message of src to dst until either fails.
func pipeWS(ctx context.Context, dst, src *websocket.Conn) {
	buf := make([]byte, 4096)
	for {
		typ, rd, err := src.Reader(ctx)
		if err != nil {
			return
		}
		wr, err := dst.Writer(ctx, typ)
		if err != nil {
			return
		}
		if _, err := io.CopyBuffer(wr, rd, buf); err != nil {
			return
		}
		if err := wr.Close(); err != nil {
			return
		}
	}
}

// rtTarget is where a realtime client dials.
type rtTarget struct {
	name string
	url  string // ws://host:port/v1/realtime?model=…
	pid  int    // the relaying process (0: none, direct)
	// pprof is the relaying process's pprof listener, which serves
	// /debug/rtstats (only.go); "": the idle test reads RSS only.
	pprof string
}

// rtDial opens a session on t and reads its first event.
func rtDial(ctx context.Context, t rtTarget) (*websocket.Conn, error) {
	c, resp, err := websocket.Dial(ctx, t.url, &websocket.DialOptions{
		HTTPHeader:      http.Header{"Authorization": {"Bearer " + benchKey}},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("upgrade: %s: %w", resp.Status, err)
		}
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	_, b, err := c.Read(ctx)
	if err != nil {
		c.CloseNow()
		return nil, fmt.Errorf("first event: %w", err)
	}
	if !strings.Contains(string(b), `"session.created"`) {
		c.CloseNow()
		return nil, fmt.Errorf("first event is not session.created: %.120s", b)
	}
	return c, nil
}

// rtThroughput runs sessions open sessions on t for d, each with a writer
// keeping window events in flight and a reader counting the echoes, and
// returns echoes per second.
func rtThroughput(t rtTarget, sessions, window int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	conns := make([]*websocket.Conn, 0, sessions)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	for range sessions {
		c, err := rtDial(ctx, t)
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
	}
	var echoes atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range conns {
		credit := make(chan struct{}, window)
		for range window {
			credit <- struct{}{}
		}
		wg.Go(func() {
			for {
				select {
				case <-credit:
				case <-stop:
					return
				}
				if err := c.Write(ctx, websocket.MessageText, rtEvent); err != nil {
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
			}
		})
		wg.Go(func() {
			for {
				_, rd, err := c.Reader(ctx)
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, rd); err != nil {
					return
				}
				echoes.Add(1)
				select {
				case credit <- struct{}{}:
				default:
				}
			}
		})
	}
	time.Sleep(d / 5) // warm: the windows fill
	n0, t0 := echoes.Load(), time.Now()
	time.Sleep(d)
	n1, elapsed := echoes.Load(), time.Since(t0)
	close(stop)
	for _, c := range conns {
		c.CloseNow()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(string); ok && n1 == n0 {
		return 0, errors.New(e)
	}
	return float64(n1-n0) / elapsed.Seconds(), nil
}

// rtLatency runs sessions sessions on t for d, each sending one event and
// waiting for its echo before the next, and returns the round trips.
func rtLatency(t rtTarget, sessions int, d time.Duration) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range sessions {
		wg.Go(func() {
			c, err := rtDial(ctx, t)
			if err == nil {
				defer c.CloseNow()
			}
			var mine []time.Duration
			for err == nil && time.Now().Before(deadline) {
				start := time.Now()
				if err = c.Write(ctx, websocket.MessageText, rtEvent); err != nil {
					break
				}
				var rd io.Reader
				if _, rd, err = c.Reader(ctx); err != nil {
					break
				}
				if _, err = io.Copy(io.Discard, rd); err != nil {
					break
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	if len(lat) == 0 {
		return nil, fmt.Errorf("no round trip: %v", firstErr)
	}
	return lat, nil
}

// rtIdle opens n sessions on t, leaves them idle, and reads the relaying
// process's RSS before and after (fresh processes: the caller starts them);
// during, when not nil, runs while they are still open.
func rtIdle(t rtTarget, n int, during func()) (idleResult, goRuntime) {
	res := idleResult{n: n}
	var rtBefore, rtAfter goRuntime
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Warm the process: first-use allocations, the upstream's pool.
	for range 20 {
		if c, err := rtDial(ctx, t); err == nil {
			c.CloseNow()
		}
	}
	time.Sleep(300 * time.Millisecond)
	var err error
	if res.rssBefore, err = rssKiB(t.pid); err != nil {
		res.err = err.Error()
		return res, goRuntime{}
	}
	if t.pprof != "" {
		rtBefore, _ = readGoRuntime(t.pprof)
	}
	conns := make([]*websocket.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	start := time.Now()
	var failed int
	var first error
	var mu sync.Mutex
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := rtDial(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
				return
			}
			conns = append(conns, c)
		})
	}
	wg.Wait()
	res.openDuration = time.Since(start)
	res.opened = len(conns)
	time.Sleep(500 * time.Millisecond) // let the process settle (GC, lazy allocations)
	if res.rssAfter, err = rssKiB(t.pid); err != nil {
		res.err = err.Error()
	}
	if t.pprof != "" {
		rtAfter, _ = readGoRuntime(t.pprof)
	}
	if during != nil {
		during()
	}
	if failed > 0 {
		res.err = fmt.Sprintf("%d of %d sessions did not open (first error: %v)", failed, n, first)
	}
	var per goRuntime
	if res.opened > 0 {
		res.perStreamKiB = float64(res.rssAfter-res.rssBefore) / float64(res.opened)
		per = rtAfter.sub(rtBefore).div(float64(res.opened))
	}
	return res, per
}

// rtResults is what the realtime phase measured.
type rtResults struct {
	sessions, window, latSessions int
	eventsPerSec                  map[string][]float64       // per round
	latency                       map[string][]time.Duration // every round trip, all rounds
	idle                          map[string]idleResult      // relay, hopgate
	idleRuntime                   map[string]goRuntime       // per idle session: goroutines, heap and stack in use
	err                           []string
}

// realtime is the realtime phase: throughput and latency rounds against
// the running relay and a fresh gateway, then the idle-session memory of
// fresh ones.
func (w *world) realtime(res *results) error {
	rt := &rtResults{sessions: 8, window: 16, latSessions: 4, eventsPerSec: map[string][]float64{},
		latency: map[string][]time.Duration{}, idle: map[string]idleResult{}, idleRuntime: map[string]goRuntime{}}
	res.realtime = rt
	echo := w.up.addrs["realtime"]
	if echo == "" {
		return errors.New("the upstream announced no realtime echo")
	}
	relay, err := startRole(roleRTRelay, envRealtime+"="+echo)
	if err != nil {
		return err
	}
	defer relay.stop()
	gw, err := w.startGateway()
	if err != nil {
		return err
	}
	defer gw.stop()
	path := "/v1/realtime?model=" + modelRealtime
	targets := []rtTarget{
		{name: rtDirect, url: "ws://" + echo + path},
		{name: rtRelay, url: "ws://" + relay.addrs["main"] + path, pid: relay.pid()},
		{name: rtHopgate, url: "ws://" + gw.addrs["main"] + path, pid: gw.pid()},
	}
	for _, t := range targets { // warm-up
		if _, err := rtThroughput(t, rt.sessions, rt.window, w.o.duration/3); err != nil {
			return fmt.Errorf("realtime warm-up, %s: %w", t.name, err)
		}
	}
	for range w.o.rounds {
		for _, i := range w.order.Perm(len(targets)) {
			t := targets[i]
			time.Sleep(w.o.settle)
			eps, err := rtThroughput(t, rt.sessions, rt.window, w.o.duration)
			if err != nil {
				rt.err = append(rt.err, t.name+" throughput: "+err.Error())
			}
			rt.eventsPerSec[t.name] = append(rt.eventsPerSec[t.name], eps)
			time.Sleep(w.o.settle)
			lat, err := rtLatency(t, rt.latSessions, w.o.duration)
			if err != nil {
				rt.err = append(rt.err, t.name+" latency: "+err.Error())
			}
			rt.latency[t.name] = append(rt.latency[t.name], lat...)
		}
	}
	for _, lat := range rt.latency {
		slices.Sort(lat)
	}
	relay.stop()
	gw.stop()

	// Memory per idle session, fresh processes.
	w.logf("realtime: %d idle sessions per relay (fresh processes)", w.o.idle)
	relay, err = startRole(roleRTRelay, envRealtime+"="+echo)
	if err != nil {
		return err
	}
	rt.idle[rtRelay], rt.idleRuntime[rtRelay] = rtIdle(rtTarget{name: rtRelay, url: "ws://" + relay.addrs["main"] + path,
		pid: relay.pid(), pprof: relay.addrs["pprof"]}, w.o.idle, nil)
	relay.stop()
	if gw, err = w.startGateway(); err != nil {
		return err
	}
	defer gw.stop()
	var profile func()
	if w.o.only == onlyRealtime && w.o.profileDir != "" {
		profile = func() {
			if err := saveProfiles(w.o.profileDir, gw.addrs["pprof"], "realtime-idle"); err != nil {
				rt.err = append(rt.err, "idle profiles: "+err.Error())
			}
		}
	}
	rt.idle[rtHopgate], rt.idleRuntime[rtHopgate] = rtIdle(rtTarget{name: rtHopgate, url: "ws://" + gw.addrs["main"] + path,
		pid: gw.pid(), pprof: gw.addrs["pprof"]}, w.o.idle, profile)
	return nil
}

// Target of the realtime row (issue 32).
const targetRTIdleRatio = 1.2 // hopgate's RSS per idle session / the bare relay's

func (r *results) renderRealtime(p func(string, ...any)) {
	rt := r.realtime
	if rt == nil {
		return
	}
	p("## Realtime sessions")
	p("")
	p("A realtime session (`GET /v1/realtime`, DESIGN.md §15) through hopgate against a bare WebSocket")
	p("relay (the same library, github.com/coder/websocket, copying each message both ways; no walk, gate")
	p("or trace) and against the upstream itself (*direct*). The upstream opens with `session.created` and")
	p("echoes every event; an event is an `input_audio_buffer.append` of 20 ms of 24 kHz PCM16 (%d bytes).", len(rtEvent))
	p("Throughput: %d sessions, %d events in flight each; latency: %d sessions sending one event at a time", rt.sessions, rt.window, rt.latSessions)
	p("(the round trip is two relayed frames); medians of rounds.")
	p("")
	p("| target | events/s | / relay | round trip p50 | p99 | over the relay, p50 | p99 |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	relayEPS := median(rt.eventsPerSec[rtRelay])
	relayLat := rt.latency[rtRelay]
	for _, name := range []string{rtDirect, rtRelay, rtHopgate} {
		eps, lat := median(rt.eventsPerSec[name]), rt.latency[name]
		p("| %s | %.0f | %.2f× | %s | %s | %s | %s |", name, eps, eps/relayEPS,
			rtUS(quantile(lat, 0.5)), rtUS(quantile(lat, 0.99)),
			rtUSDiff(quantile(lat, 0.5)-quantile(relayLat, 0.5)), rtUSDiff(quantile(lat, 0.99)-quantile(relayLat, 0.99)))
	}
	p("")
	rel, hg := rt.idle[rtRelay], rt.idle[rtHopgate]
	p("Memory per idle open session (fresh processes, %d sessions each, RSS after − before, divided by the sessions open;", r.opts.idle)
	p("goroutines, heap and stacks in use likewise, from the process's runtime.MemStats):")
	p("")
	p("| relay | KiB per session | goroutines | Go heap KiB | Go stacks KiB | sessions open | error |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, x := range []struct {
		name string
		v    idleResult
	}{{rtRelay, rel}, {rtHopgate, hg}} {
		g := rt.idleRuntime[x.name]
		p("| %s | %.1f | %.2f | %.1f | %.1f | %d | %s |", x.name, x.v.perStreamKiB, g.goroutines, g.heapKiB, g.stackKiB, x.v.opened, x.v.err)
	}
	p("")
	verdict := "met"
	ratio := hg.perStreamKiB / rel.perStreamKiB
	if rel.perStreamKiB <= 0 || hg.err != "" || rel.err != "" {
		verdict = "not measured"
	} else if ratio > targetRTIdleRatio {
		verdict = "**missed**"
	}
	p("Target (issue 32): memory per idle session ≤ %.1f× the bare relay's: %.2f× — %s.", targetRTIdleRatio, ratio, verdict)
	if len(rt.err) > 0 {
		p("")
		for _, e := range rt.err {
			p("- %s", e)
		}
	}
	p("")
}

func rtUS(d time.Duration) string { return fmt.Sprintf("%.0f µs", us(d)) }

func rtUSDiff(d time.Duration) string { return fmt.Sprintf("%+.0f µs", us(d)) }
