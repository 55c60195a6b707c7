package translate

import (
	"strconv"
	"strings"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// The Responses objects a translated answer is made of, written by hand
// for the stream and the complete answer alike, so that a stream's final
// response.output is byte for byte the non-streaming answer's output.

// respItemOut is one output item: a message with one output_text part, a
// function call, or a reasoning item with one summary_text part. text is
// the text, the arguments or the reasoning so far.
type respItemOut struct {
	kind   blockKind
	id     string
	callID string
	name   string
	text   []byte
	done   bool
	// enc: a reasoning item's encrypted_content (reasoning.go), "" for none.
	enc string
	sig []byte // the stream's thinking block's signature so far
	// The stream's: lit is text as a JSON string once the item is done,
	// quoted once for the four events that repeat it (nil: quote text);
	// ref is what every event of the item says after its sequence_number
	// (item_id, output_index, and content_index or summary_index).
	lit, ref []byte
}

// appendText appends the item's text as a JSON string.
func (it *respItemOut) appendText(dst []byte) []byte {
	if it.lit != nil {
		return append(dst, it.lit...)
	}
	return jsonscan.AppendQuote(dst, it.text)
}

// responseIDs derives the response's and its items' ids from the upstream
// message id, so a retried request's ids are as stable as the upstream's.
func responseBase(messageID string) string {
	return strings.TrimPrefix(messageID, "msg_")
}

func itemID(kind blockKind, base string, index int) string {
	var p string
	switch kind {
	case blockTool:
		p = "fc_"
	case blockThinking:
		p = "rs_"
	default:
		p = "msg_"
	}
	return p + base + "_" + strconv.Itoa(index)
}

// appendItem writes an output item; status is "in_progress" for an
// output_item.added, else the item's own.
func appendItem(dst []byte, it *respItemOut, status string) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendQuote(dst, it.id)
	switch it.kind {
	case blockTool:
		dst = append(dst, `,"type":"function_call","status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","call_id":`...)
		dst = jsonscan.AppendQuote(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = jsonscan.AppendQuote(dst, it.name)
		dst = append(dst, `,"arguments":`...)
		if status == "in_progress" {
			dst = append(dst, `""`...)
		} else {
			dst = it.appendText(dst)
		}
		return append(dst, '}')
	case blockThinking:
		dst = append(dst, `,"type":"reasoning","summary":[`...)
		if status != "in_progress" {
			dst = appendSummaryPart(dst, it)
		}
		dst = append(dst, ']')
		if it.enc != "" && status != "in_progress" {
			dst = append(dst, `,"encrypted_content":`...)
			dst = jsonscan.AppendQuote(dst, it.enc)
		}
		return append(dst, '}')
	}
	dst = append(dst, `,"type":"message","status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","role":"assistant","content":[`...)
	if status != "in_progress" {
		dst = appendTextPart(dst, it)
	}
	return append(dst, "]}"...)
}

// appendTextPart and appendSummaryPart write the item's one part, with
// its text so far.
func appendTextPart(dst []byte, it *respItemOut) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = it.appendText(dst)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

func appendSummaryPart(dst []byte, it *respItemOut) []byte {
	dst = append(dst, `{"type":"summary_text","text":`...)
	dst = it.appendText(dst)
	return append(dst, '}')
}

// respStatus is a finished response's status and incomplete reason for an
// Anthropic stop_reason: an answer cut by max_tokens (or the context
// window) is incomplete with max_output_tokens, a refusal incomplete with
// content_filter; every other stop completed it.
func respStatus(stopReason string) (status, reason string) {
	switch stopReason {
	case "max_tokens", "model_context_window_exceeded":
		return "incomplete", "max_output_tokens"
	case "refusal":
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

// respHead describes the response object around its output.
type respHead struct {
	id, model string
	created   int64
	status    string // in_progress, completed, incomplete, failed
	reason    string // incomplete_details.reason
	errCode   string // failed: error.code and message
	errMsg    string
	usage     *anUsage
}

// appendResponse writes a response object with the given output items.
func appendResponse(dst []byte, h *respHead, items []respItemOut) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonscan.AppendQuote(dst, h.id)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = appendInt(dst, h.created)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, h.status...)
	dst = append(dst, `","background":false,"error":`...)
	if h.errCode != "" {
		dst = append(dst, `{"code":`...)
		dst = jsonscan.AppendQuote(dst, h.errCode)
		dst = append(dst, `,"message":`...)
		dst = jsonscan.AppendQuote(dst, h.errMsg)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if h.reason != "" {
		dst = append(dst, `{"reason":"`...)
		dst = append(dst, h.reason...)
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"model":`...)
	dst = jsonscan.AppendQuote(dst, h.model)
	dst = append(dst, `,"output":[`...)
	for i := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		st := "completed"
		if !items[i].done {
			st = "incomplete"
		}
		dst = appendItem(dst, &items[i], st)
	}
	dst = append(dst, `],"parallel_tool_calls":true,"store":false,"usage":`...)
	if h.usage == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendRespUsage(dst, *h.usage)
	}
	return append(dst, '}')
}

// appendRespUsage writes Responses' usage: input_tokens counts the whole
// prompt (Anthropic's input plus cache reads and writes), cached_tokens
// the cache reads, reasoning_tokens the thinking when reported.
func appendRespUsage(dst []byte, u anUsage) []byte {
	in := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	dst = append(dst, `{"input_tokens":`...)
	dst = appendInt(dst, in)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = appendInt(dst, u.CacheReadInputTokens)
	dst = append(dst, `},"output_tokens":`...)
	dst = appendInt(dst, u.OutputTokens)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	var r int64
	if u.OutputTokensDetails != nil {
		r = u.OutputTokensDetails.ThinkingTokens
	}
	dst = appendInt(dst, r)
	dst = append(dst, `},"total_tokens":`...)
	dst = appendInt(dst, in+u.OutputTokens)
	return append(dst, '}')
}
