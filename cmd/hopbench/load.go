package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// target is one thing under measurement: where to send and what to add.
type target struct {
	name   string // direct, proxy, hopgate, portkey, ...
	url    string // full chat/completions URL
	header http.Header
	model  string // model name in the request body
	pid    int    // process serving it (RSS), 0 if not ours
	admin  string // a hopgate's admin listener (its /metrics), "" for others
	pprof  string // a hopgate's pprof listener, "" for others
	// responses: the target speaks OpenAI's Responses API (responses.go).
	responses bool
}

// workload is what a request asks for.
type workload struct {
	name   string
	stream bool
	// burst asks the upstream to write the whole stream at once (one write,
	// one flush), as providers do under load and on resumed streams: a
	// proxy that flushes per frame pays StreamFrames writes for it, one
	// that flushes per read pays one.
	burst bool
}

var (
	wlComplete = workload{name: "completion-1KB", stream: false}
	wlStream   = workload{name: fmt.Sprintf("stream-%d-frames", StreamFrames), stream: true}
	wlBurst    = workload{name: fmt.Sprintf("stream-%d-frames-burst", StreamFrames), stream: true, burst: true}
)

// burstMarker in a request body selects the fast upstream's burst stream.
// It is an ordinary field (`user`), so every proxy and hopgate's
// pass-through carry it to the upstream unchanged.
const burstMarker = `"user":"hopbench-burst"`

// body is the request body of wl for model.
func (wl workload) body(model string) []byte {
	b := requestBody(model, wl.stream)
	if wl.burst {
		b = append(append(b[:len(b)-1], ','), burstMarker+"}"...)
	}
	return b
}

// prompt is a small realistic request (about 300 bytes).
const prompt = "You are a helpful assistant. Summarise the following paragraph in one sentence: " +
	"the gateway keeps the caller unaware of upstream failures by walking a price-ordered chain, " +
	"skipping open channels and holding stream frames until one is decisive."

func requestBody(model string, stream bool) []byte {
	return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":%q}],"stream":%t,"max_tokens":256}`,
		model, prompt, stream)
}

func (t target) request(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = t.header.Clone()
	return req, nil
}

func baseHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Bearer "+benchKey)
	return h
}

// sample is the outcome of one timed run against one target.
type sample struct {
	requests, ok int
	elapsed      time.Duration
	lat          []time.Duration // successful requests only, sorted
	errors       map[string]int
	// cpu is the CPU time the target's process ran during the turn (0:
	// not measured, the target is not one process of ours).
	cpu time.Duration
	// sys is the read and write system calls the target's process made
	// during the turn (zero: not measured).
	sys sysIO
}

// writesPerReq and readsPerReq are the target process's write and read
// system calls per successful request: what a change to how a relay
// writes costs, counted, not timed.
func writesPerReq(s sample) float64 { return perOK(s, s.sys.writes) }
func readsPerReq(s sample) float64  { return perOK(s, s.sys.reads) }

func perOK(s sample, n int64) float64 {
	if n <= 0 || s.ok == 0 {
		return math.NaN()
	}
	return float64(n) / float64(s.ok)
}

// cpuPerReq is the target process's CPU time per successful request, in
// µs: on a machine where the load generator and the target share the
// cores, a steadier measure of a component's cost than req/s.
func cpuPerReq(s sample) float64 {
	if s.cpu <= 0 || s.ok == 0 {
		return math.NaN()
	}
	return float64(s.cpu.Nanoseconds()) / 1e3 / float64(s.ok)
}

func (s sample) rps() float64 {
	if s.elapsed <= 0 || s.ok == 0 {
		return math.NaN()
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

func (s sample) q(p float64) time.Duration { return quantile(s.lat, p) }

// attackMode is open-loop at a fixed rate, or closed-loop at a fixed
// number of workers as fast as they can go.
type attackMode struct {
	rate    int    // requests per second; 0 means closed loop
	workers uint64 // closed loop: exactly this many in flight
}

func (m attackMode) String() string {
	if m.rate > 0 {
		return fmt.Sprintf("%d req/s", m.rate)
	}
	return fmt.Sprintf("%d workers", m.workers)
}

// attack runs vegeta against t for d and checks every answer.
func attack(t target, wl workload, m attackMode, d time.Duration) sample {
	body := t.body(wl.stream)
	if wl.burst {
		body = wl.body(t.model)
	}
	tg := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodPost, URL: t.url, Body: body, Header: t.header})
	opts := []func(*vegeta.Attacker){vegeta.KeepAlive(true), vegeta.HTTP2(false), vegeta.Timeout(30 * time.Second),
		vegeta.Redirects(vegeta.NoFollow)}
	pacer := vegeta.Pacer(vegeta.ConstantPacer{Freq: m.rate, Per: time.Second})
	if m.rate <= 0 {
		opts = append(opts, vegeta.Workers(m.workers), vegeta.MaxWorkers(m.workers))
		pacer = vegeta.ConstantPacer{} // as fast as the workers go
	} else {
		opts = append(opts, vegeta.Workers(32))
	}
	atk := vegeta.NewAttacker(opts...)
	s := sample{errors: map[string]int{}}
	start := time.Now()
	var last time.Time
	for r := range atk.Attack(tg, pacer, d, t.name) {
		s.requests++
		if e := r.End(); e.After(last) {
			last = e
		}
		if msg := t.check(r.Code, r.Error, r.Body, wl.stream); msg != "" {
			s.errors[msg]++
			continue
		}
		s.ok++
		s.lat = append(s.lat, r.Latency)
	}
	s.elapsed = last.Sub(start)
	slices.Sort(s.lat)
	return s
}

// checkAnswer says what is wrong with an answer, "" when it is a complete,
// successful one. A gateway that answers fast but wrong must not win.
func checkAnswer(code uint16, errMsg string, body []byte, stream bool) string {
	switch {
	case errMsg != "" && code == 0:
		return trimErr(errMsg)
	case code != http.StatusOK:
		return fmt.Sprintf("status %d", code)
	case stream && !bytes.HasSuffix(bytes.TrimRight(body, "\n"), []byte("data: [DONE]")):
		return "stream without [DONE]"
	case stream && bytes.Contains(body, []byte(`"error"`)):
		return "in-band error frame"
	case !stream && !bytes.Contains(body, []byte(`"chat.completion"`)):
		return "not a chat.completion body"
	}
	return ""
}

func trimErr(s string) string {
	// Keep error kinds countable: drop the per-request addresses.
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// streamClient is the harness's own HTTP client for stream measurements:
// many connections per host, no compression, no timeout (idle streams).
func streamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, DisableCompression: true,
		IdleConnTimeout: 30 * time.Second,
	}}
}

// firstContent is how the harness recognises the first content frame: the
// fast upstream's tokens are "tok1 ", "tok2 ", …
var firstContent = []byte(`"content":"tok`)

// ttft measures time to first token: workers closed-loop stream requests
// for d; each records the time from sending to reading the first content
// frame, then reads the stream to its end.
func ttft(c *http.Client, t target, workers int, d time.Duration) sample {
	body := t.body(true)
	var mu sync.Mutex
	s := sample{errors: map[string]int{}}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var lat []time.Duration
			errs := map[string]int{}
			for time.Now().Before(deadline) {
				v, err := oneTTFT(c, t, body)
				if err != nil {
					errs[err.Error()]++
					continue
				}
				lat = append(lat, v)
			}
			mu.Lock()
			s.lat = append(s.lat, lat...)
			for k, v := range errs {
				s.errors[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	s.ok = len(s.lat)
	s.requests = s.ok
	for _, n := range s.errors {
		s.requests += n
	}
	slices.Sort(s.lat)
	return s
}

func oneTTFT(c *http.Client, t target, body []byte) (time.Duration, error) {
	req, err := t.request(context.Background(), body)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("transport: %s", trimErr(err.Error()))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	var first time.Duration
	var last []byte
	for {
		line, err := br.ReadSlice('\n')
		if first == 0 && bytes.Contains(line, t.firstContent()) {
			first = time.Since(start)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			last = append(last[:0], line...)
		}
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			return 0, fmt.Errorf("read: %s", trimErr(err.Error()))
		}
	}
	if first == 0 {
		return 0, fmt.Errorf("no content frame")
	}
	if !t.streamEnd(last) {
		return 0, fmt.Errorf("stream without [DONE]")
	}
	return first, nil
}

// idleResult is the memory cost of n committed, idle streams.
type idleResult struct {
	n             int
	opened        int
	rssBefore     int64 // KiB
	rssAfter      int64 // KiB
	goroutines    [2]float64
	heapInuse     [2]float64
	openDuration  time.Duration
	err           string
	perStreamKiB  float64
	goroutinesPer float64
}

// idleStreams opens n streams through t whose upstream stalls after the
// first content frame (the gate has committed), and reads t's process RSS
// before and after. scrape, when set, reads Go runtime gauges too.
func idleStreams(t target, n int, scrape func() (goroutines, heap float64), whileOpen func()) idleResult {
	res := idleResult{n: n}
	c := streamClient()
	defer c.CloseIdleConnections()
	body := requestBody(t.model, true)
	// Warm the process: connection pools, first-use allocations.
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = openIdle(ctx, c, t, body)
		cancel()
	}
	time.Sleep(300 * time.Millisecond)
	var err error
	if res.rssBefore, err = rssKiB(t.pid); err != nil {
		res.err = err.Error()
		return res
	}
	if scrape != nil {
		res.goroutines[0], res.heapInuse[0] = scrape()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opened, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	sem := make(chan struct{}, 64) // bounded dialing: no SYN backlog overflow
	start := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	defer dcancel()
	launched := 0
launch:
	for range n {
		select {
		case sem <- struct{}{}:
		case <-dctx.Done():
			break launch
		}
		launched++
		wg.Go(func() {
			var once sync.Once
			release := func() { once.Do(func() { <-sem; ready <- struct{}{} }) }
			defer release()
			err := openIdle(ctx, c, t, body, func() { opened.Add(1); release() })
			if err != nil && ctx.Err() == nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		})
	}
wait:
	for range launched {
		select {
		case <-ready:
		case <-dctx.Done():
			break wait
		}
	}
	res.openDuration = time.Since(start)
	res.opened = int(opened.Load())
	time.Sleep(500 * time.Millisecond) // let the process settle (GC, lazy allocations)
	res.rssAfter, err = rssKiB(t.pid)
	if err != nil {
		res.err = err.Error()
	}
	if scrape != nil {
		res.goroutines[1], res.heapInuse[1] = scrape()
	}
	if whileOpen != nil {
		whileOpen()
	}
	if res.opened < n {
		res.err = fmt.Sprintf("%d of %d streams did not open (%d failed; first error: %v)", n-res.opened, n, failed.Load(), firstErr.Load())
	}
	cancel()
	wg.Wait()
	if res.opened > 0 {
		res.perStreamKiB = float64(res.rssAfter-res.rssBefore) / float64(res.opened)
		res.goroutinesPer = (res.goroutines[1] - res.goroutines[0]) / float64(res.opened)
	}
	return res
}

// openIdle sends a stream request, reads until the first content frame,
// calls onOpen (if any) and then waits for ctx; without onOpen it returns
// right after the first frame (warm-up).
func openIdle(ctx context.Context, c *http.Client, t target, body []byte, onOpen ...func()) error {
	req, err := t.request(ctx, body)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if bytes.Contains(line, firstContent) {
			break
		}
		if err != nil {
			return fmt.Errorf("before first content: %w", err)
		}
	}
	if len(onOpen) == 0 {
		return nil
	}
	onOpen[0]()
	<-ctx.Done()
	return nil
}
