package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// targetTranslatingResponses is the measured hopgate serving an OpenAI
// Responses client (POST /v1/responses) from the Anthropic channel of
// model bench-anthropic: beside *translating* (the chat client on the
// same channel), it measures the Responses translation (issue 31).
const targetTranslatingResponses = "translating-responses"

// targetPassthroughResponses is the Responses client on hopgate's OpenAI
// channel (model bench), whose upstream answers /v1/responses with the
// bytes the translation makes (responses_upstream.go): the pass-through
// the Responses translation is measured against, as *hopgate* is for chat.
const targetPassthroughResponses = "passthrough-responses"

// targetResponsesOverChat: the Responses translation's throughput over its
// pass-through, divided by the chat translation's over its own, must be
// at least this (1.00 less the spread rounds of one run show).
const targetResponsesOverChat = 0.95

// responsesTarget is t (the chat translating target) on /v1/responses.
func responsesTarget(t target) target {
	t.name, t.responses = targetTranslatingResponses, true
	t.url = strings.TrimSuffix(t.url, "/chat/completions") + "/responses"
	return t
}

// body is the request t is sent: the same prompt and limit in either API.
func (t target) body(stream bool) []byte {
	if !t.responses {
		return requestBody(t.model, stream)
	}
	return fmt.Appendf(nil, `{"model":%q,"input":[{"role":"user","content":%q}],"stream":%t,"max_output_tokens":256}`,
		t.model, prompt, stream)
}

// check is checkAnswer in t's API: a Responses stream ends with
// response.completed (no [DONE]), a body is a completed response object.
func (t target) check(code uint16, errMsg string, body []byte, stream bool) string {
	if !t.responses {
		return checkAnswer(code, errMsg, body, stream)
	}
	switch {
	case errMsg != "" && code == 0:
		return trimErr(errMsg)
	case code != http.StatusOK:
		return fmt.Sprintf("status %d", code)
	case stream && !bytes.Contains(body, []byte("event: response.completed\n")):
		return "stream without response.completed"
	case stream && bytes.Contains(body, []byte("event: error\n")):
		return "in-band error event"
	case !stream && !bytes.Contains(body, []byte(`"status":"completed"`)):
		return "not a completed response"
	}
	return ""
}

// responsesFirstContent is the first text delta of a Responses stream
// (the fast upstream's tokens are "tok1 ", "tok2 ", …).
var responsesFirstContent = []byte(`"delta":"tok`)

func (t target) firstContent() []byte {
	if t.responses {
		return responsesFirstContent
	}
	return firstContent
}

// streamEnd reports whether last, a stream's last non-empty line, ends a
// complete answer.
func (t target) streamEnd(last []byte) bool {
	if t.responses {
		return bytes.HasPrefix(last, []byte(`data: {"type":"response.completed"`))
	}
	return bytes.HasPrefix(last, []byte("data: [DONE]"))
}

// renderTranslatingResponses is the Responses row of the translating
// section: the Responses client on the Anthropic channel against the chat
// client on it, in the same rounds (issue 31: it must cost no more than
// the chat translation, ratio ≥ 1.00 within the rounds' spread).
func (r *results) renderTranslatingResponses(p printer) {
	if mx := r.throughput[wlStream.name]; mx == nil || len(mx.by[targetTranslatingResponses]) == 0 {
		return
	}
	p("*%s* is the same process and channel serving an OpenAI **Responses** client (`POST /v1/responses`):", targetTranslatingResponses)
	p("the request translated to Messages, the stream to Responses' typed events (response.created … response.completed).")
	p("")
	p("| workload | translating, chat (req/s) | translating, responses (req/s) | responses / chat |")
	p("| --- | ---: | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream} {
		mx := r.throughput[wl.name]
		if mx == nil || len(mx.by[targetTranslatingResponses]) == 0 {
			continue
		}
		p("| %s | %s | %s | %s%s |", wl.name, fmtRPS(med(mx, targetTranslating, rpsOf)), fmtRPS(med(mx, targetTranslatingResponses, rpsOf)),
			fmtRatio(ratio(mx, targetTranslatingResponses, targetTranslating, rpsOf)), ratioRounds(mx, targetTranslatingResponses, targetTranslating, rpsOf))
	}
	p("")
	p("A Responses answer is larger on the wire than the same answer as chat (its done events repeat the text:")
	p("%d bytes against %d for this stream), and the client and the gateway pay for every byte. *%s* is", respStreamBytes(), chatStreamBytes(), targetPassthroughResponses)
	p("the same process passing those exact bytes through from an OpenAI channel, so each API's translation")
	p("is measured against its own pass-through, with the same bytes on the wire on both sides of the ratio:")
	p("")
	var verdicts []string
	p("| workload | chat: translating / pass-through | responses: translating / pass-through | responses' over chat's |")
	p("| --- | ---: | ---: | ---: |")
	for _, wl := range []workload{wlComplete, wlStream} {
		mx := r.throughput[wl.name]
		if mx == nil || len(mx.by[targetPassthroughResponses]) == 0 {
			continue
		}
		chat := ratio(mx, targetTranslating, "hopgate", rpsOf)
		resp := ratio(mx, targetTranslatingResponses, targetPassthroughResponses, rpsOf)
		p("| %s | %s%s | %s%s | %s |", wl.name, fmtRatio(chat), ratioRounds(mx, targetTranslating, "hopgate", rpsOf),
			fmtRatio(resp), ratioRounds(mx, targetTranslatingResponses, targetPassthroughResponses, rpsOf), fmtRatio(resp/chat))
		verdicts = append(verdicts, fmt.Sprintf("%s %s", wl.name, verdict(resp/chat >= targetResponsesOverChat)))
	}
	p("")
	if len(verdicts) > 0 {
		p("Target (issue 31): the Responses translation costs no more than the chat translation, each against its")
		p("own pass-through (responses' over chat's ≥ %.2f×, the rounds' noise): %s.", targetResponsesOverChat, strings.Join(verdicts, ", "))
		p("")
	}
	per := map[string]microBench{}
	for _, b := range r.micro.benches {
		if b.pkg == "internal/translate" {
			per[b.name] = b
		}
	}
	chat, ok1 := per["BenchmarkMessagesToChatStreamTextDelta"]
	resp, ok2 := per["BenchmarkMessagesToResponsesStreamTextDelta"]
	if ok1 && ok2 && chat.nsPerOp > 0 {
		p("Per text delta (*Go micro-benchmarks* below): %s ns and %.0f allocations to a Responses event, %s ns and %.0f to a chat chunk (%.2f×).",
			fmtNs(resp.nsPerOp), resp.allocsPerOp, fmtNs(chat.nsPerOp), chat.allocsPerOp, resp.nsPerOp/chat.nsPerOp)
		p("")
	}
	chat, ok1 = per["BenchmarkStreamCassettes/text_50/chat"]
	resp, ok2 = per["BenchmarkStreamCassettes/text_50/responses"]
	if ok1 && ok2 && chat.nsPerOp > 0 {
		p("Per stream (this workload's upstream stream, StreamCassettes/text_50): %s ns and %.0f allocations to Responses events, %s ns and %.0f to chat chunks (%.2f×).",
			fmtNs(resp.nsPerOp), resp.allocsPerOp, fmtNs(chat.nsPerOp), chat.allocsPerOp, resp.nsPerOp/chat.nsPerOp)
		p("")
	}
}
