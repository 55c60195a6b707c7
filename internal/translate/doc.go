// Package translate converts between the two API families a chain may cross
// (DESIGN.md §8): OpenAI Chat Completions ("chat") and Anthropic Messages
// ("messages", also spoken by Bedrock and Vertex). It covers requests both
// ways (ChatToMessages, MessagesToChat), complete answers both ways
// (MessageToChatCompletion, ChatCompletionToMessage), streams both ways
// (MessagesToChatStream, ChatToMessagesStream), upstream error bodies
// (AnthropicErrorToOpenAI, OpenAIErrorToAnthropic, ContextLengthExceeded)
// and the in-band interruption frame of each dialect. OpenAI's Responses
// API is translated one way, for an Anthropic-family channel (DESIGN.md
// §14, the responses_*.go files): the request (ResponsesToMessages), the
// answer (MessageToResponse) and the stream into Responses' typed events
// (MessagesToResponsesStream, whose Interrupt ends a cut stream with the
// error event and response.failed); ResponsesNativeOnly names what only
// the OpenAI family can serve, for the walk to skip Anthropic entries.
//
// The request path uses it only across families: same family in and out is
// passed through byte for byte and never reaches this package.
//
// Every stream transcoder call classifies the upstream event it was given
// for the L3 stream gate (a gate.Info, DESIGN.md §2) while translating it,
// so the request path holds, commits or discards without parsing twice. The
// OpenAI side is classified by gate.InspectChat itself (one classification);
// the Anthropic side follows the same rules on Anthropic's events:
// message_start, ping, an empty text block start and signatures are not
// decisive; text, a tool_use block, tool input and thinking text are.
//
// Usage in every gate.Info is in OpenAI's terms whatever the family:
// InputTokens counts the whole prompt, cached tokens included (Anthropic's
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens), so
// a tenant is charged the same whichever family served the request.
//
// What one family can express and the other cannot is either dropped and
// named in the Dropped list the caller records on the hop's span, or, when
// dropping would change the meaning of the request, refused with an *Error
// (ErrInvalid: the client's request is wrong for this target; ErrUnsupported:
// it is well-formed but this target family cannot serve it). Thinking blocks
// and their signatures are never sent to the other family.
//
// It owns no I/O, clock, HTTP or policy: times (the "created" field) come
// from the caller, and what to do with a classification is the request
// path's decision. Encoding uses encoding/json for requests and bodies; the
// stream transcoders write their frames by hand to keep per-event cost low
// (see the benchmarks), and Anthropic's content_block_delta events — most
// of any stream — are read by hand too (stream_fast.go: 265 ns and no
// allocation per text delta against 1.7 µs and 11 allocations through
// encoding/json; FuzzFastDelta holds the two to the same output). The
// Responses translator goes further: a delta that is the last one with
// another text is read from the bytes around its literal
// (stream_fastmemo.go), and the other events of a stream are read by
// hand too (stream_fastevent.go, FuzzFastEvent; FuzzFastResponsesStream
// holds both to the general path); the chat one decodes those with
// encoding/json, as does either on every shape the readers leave to it.
// OpenAI chunks that are the previous text chunk with another text are
// not decoded again (ChatToMessagesStream.learn: 138 ns against 2.7 µs;
// FuzzFastChunk).
package translate
