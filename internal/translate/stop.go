package translate

// FinishReason maps an Anthropic stop_reason to an OpenAI finish_reason:
//
//	end_turn, stop_sequence          → stop
//	max_tokens                       → length
//	model_context_window_exceeded    → length (the answer was cut by the window)
//	tool_use                         → tool_calls
//	refusal                          → content_filter (the safety classifier stopped the answer)
//	pause_turn                       → stop (a server-tool loop paused; an OpenAI client has
//	                                   no way to resume it, and what was said is complete)
//	anything else, or none           → stop
func FinishReason(stopReason string) string {
	switch stopReason {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	default:
		return "stop"
	}
}

// StopReason maps an OpenAI finish_reason to an Anthropic stop_reason:
//
//	stop                       → end_turn (OpenAI does not say whether a stop sequence matched)
//	length                     → max_tokens
//	tool_calls, function_call  → tool_use
//	content_filter             → refusal
//	anything else, or none     → end_turn
func StopReason(finishReason string) string {
	switch finishReason {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	default:
		return "end_turn"
	}
}
