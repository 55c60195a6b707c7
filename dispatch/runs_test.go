package dispatch

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// countingWriter records what reached the client: the bytes, and how many
// writes and flushes carried them.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.ResponseRecorder.Write(b)
}

func (w *countingWriter) Flush() {
	w.flushes++
	w.ResponseRecorder.Flush()
}

// chatChunk is an upstream chat chunk: a delta of choice 0, or (delta "")
// the bare choices value given.
func chatChunk(delta string) string {
	return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
}

// TestBurstRuns: after commit the frames of one upstream read are written
// to the client as runs of the reader's buffer (runs.go), not one by one.
// The bytes must still be exactly the upstream's, in order, with the
// frames the client does not get left out (the usage chunk hopgate asked
// for), usage, finish and [DONE] still read from frames that look like
// plain content, an error frame in a burst still cutting the stream (no
// [DONE], nothing after it), and a frame split across reads, or a run cut
// by a read, still intact: a run written after the next read moved the
// buffer would send other bytes.
func TestBurstRuns(t *testing.T) {
	role := chatChunk(`{"role":"assistant","content":""}`)
	var content []string
	for i := range 40 {
		content = append(content, chatChunk(`{"content":"tok`+strings.Repeat("x", i)+` "}`))
	}
	// Content that spells what the fast path must not be fooled by.
	tricky := []string{
		chatChunk(`{"content":"\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9}"}`),
		chatChunk(`{"content":"data: [DONE]\n\n"}`),
		chatChunk(`{"content":"\"finish_reason\":\"stop\"} ]}"}`),
		chatChunk(`{"content":"{\"error\":{\"message\":\"no\"}}"}`),
	}
	usage := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":42,"total_tokens":53}}` + "\n\n"
	finish := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	errFrame := `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n"
	done := "data: [DONE]\n\n"

	var frames []string
	frames = append(frames, role)
	frames = append(frames, content[:20]...)
	frames = append(frames, tricky...)
	frames = append(frames, content[20:]...)
	complete := append(append([]string{}, frames...), finish, usage, done)
	whole := strings.Join(complete, "")
	// What the client gets: all of it but the usage chunk it did not ask for.
	delivered := strings.Replace(whole, usage, "", 1)
	cutBody := strings.Join(append(append([]string{}, frames[:30]...), errFrame, finish, done), "")

	for _, tc := range []struct {
		name string
		// writes are the upstream's writes, each flushed.
		writes []string
		// want is the client's bytes up to the in-band error frame of a
		// cut stream (cut), or all of them.
		want      string
		cut       bool
		maxWrites int // ResponseWriter writes for the frames (headers aside)
	}{
		// Why: one upstream write of the whole stream is a handful of
		// client writes (one per read), not one per frame.
		{"one burst", []string{whole}, delivered, false, 8},
		// Why: reads that end inside a frame, and a run that a read ends:
		// the run must be written before the read that moves the buffer.
		{"split across reads", splitAt(whole, 700, 701, 3000, 3333, 6100), delivered, false, 16},
		// Why: the usage chunk in the middle of a burst splits the run,
		// and is still read (usage) though the client does not get it.
		{"usage before finish in one write", []string{strings.Join(frames, ""), finish + usage + done}, delivered, false, 8},
		// Why: an error frame inside a burst cuts the stream there: what
		// came before it is delivered, not the finish or [DONE] after it.
		{"error in a burst", []string{cutBody}, strings.Join(frames[:30], ""), true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
			a := startStream(t, w, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				rc := http.NewResponseController(w)
				for _, b := range tc.writes {
					_, _ = w.Write([]byte(b))
					_ = rc.Flush()
				}
			})
			res := a.End()
			body := w.Body.String()
			if tc.cut {
				if res.Outcome != OutcomeInterrupted || !strings.HasPrefix(body, tc.want) || strings.Contains(body, "[DONE]\n\n") && strings.HasSuffix(body, done) {
					t.Fatalf("outcome %q, body %q", res.Outcome, body)
				}
				rest := body[len(tc.want):]
				if !strings.Contains(rest, "overloaded") && !strings.Contains(rest, "error") || strings.Contains(rest, `"finish_reason":"stop"`) {
					t.Fatalf("after the delivered frames: %q, want only the in-band error frame", rest)
				}
				return
			}
			if res.Outcome != OutcomeOK || body != tc.want {
				t.Fatalf("outcome %q, body differs from the upstream's:\n got %q\nwant %q", res.Outcome, body, tc.want)
			}
			if !res.Usage.Present || res.Usage.InputTokens != 11 || res.Usage.OutputTokens != 42 {
				t.Fatalf("usage %+v, want the usage chunk's 11/42 (not the text that spells usage)", res.Usage)
			}
			if w.writes > tc.maxWrites {
				t.Fatalf("%d writes for %d frames, want at most %d (runs)", w.writes, len(complete), tc.maxWrites)
			}
		})
	}
}

// splitAt cuts s at the given offsets.
func splitAt(s string, at ...int) []string {
	var out []string
	prev := 0
	for _, i := range at {
		out = append(out, s[prev:i])
		prev = i
	}
	return append(out, s[prev:])
}
