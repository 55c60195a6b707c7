// Package upstream is a fake OpenAI-compatible provider that fails the way
// real providers fail. It owns the fault grammar below, the deterministic
// healthy answers and the request log; it must not import any hopgate
// package, so every end-to-end test, the demo, the soak test and the
// benchmarks can use it as a neutral upstream.
//
// # Healthy answers
//
// An answer is n tokens, Token(1)..Token(n) = "tok1 tok2 ... tokn " (default
// n = 8; see Answer). A stream is: a role-only chunk (content ""), one chunk
// per token, a finish chunk (finish_reason "stop"), a usage chunk (choices
// [], usage) only when stream_options.include_usage is true, then
// "data: [DONE]". Every frame is flushed. The "model" field echoes the model
// as requested, fault suffix included. When the conversation ends with an
// assistant message that is a prefix of the answer (a prefill resume), only
// the continuation is produced.
//
// Endpoints (with or without the /v1 prefix): POST chat/completions,
// completions, responses (typed events, no [DONE]), embeddings (Embedding),
// images/generations, audio/speech (SpeechAudio, audio/mpeg),
// audio/transcriptions (multipart; the text is FileDigest of the upload);
// GET models.
//
// # Fault grammar
//
// The fault is chosen per request by the model name:
//
//	model[|fault][|option]...
//
// A name carries at most one fault and any options. Unknown words are a 400
// with code "unknown_fault", so a typo never passes as a healthy upstream.
// Status faults (chosen before anything is streamed):
//
//	400..599              that status with a realistic body (502/504: HTML from a "load balancer")
//	429:ra=7              ... with Retry-After: 7 (any status)
//	context-length        400, error.code context_length_exceeded
//	content-filter        400, error.code content_filter
//	flap=30s              503 for 30 s after the first request for this model (Clock), then healthy
//	flap=30s/60s          503 for the first 30 s of every 60 s period
//	reject-prefill        400 when the last message is an assistant message, else healthy
//	redirect              302 to http://127.0.0.2:1/elsewhere
//
// Transport faults:
//
//	reset                 TCP RST before any response byte (hijack, SO_LINGER 0)
//	no-headers            read the request, never answer, until the client leaves
//	short-body            Content-Length larger than the body, then the connection dies
//
// Faults after 200 (streams; non-streaming requests get the body analogue):
//
//	slow-first-token=5s   headers and a ": keep-alive" comment at once, the stream 5 s later
//	                      (non-stream: headers at once, body 5 s later)
//	stream-error          role chunk, then data: {"error":{...}}, then a clean end
//	stream-error-event    same with "event: error" (non-stream: both are error-body)
//	cut=40                40 content tokens, then the connection dies: no finish, no [DONE]
//	                      (tokens default to 2*cut; non-stream: half the body, then dies)
//	stall=10s             half the tokens, a 10 s pause, the rest (non-stream: half the body)
//	malformed             a "data: {not json" frame mid-stream (non-stream: bad-json)
//	no-done               finish_reason but no [DONE]
//	error-body            200 whose JSON body is {"error":{...}} (also for stream requests)
//	bad-json              200 whose body is not JSON (also for stream requests)
//	endless-frame         200 stream with one data line that never ends
//	endless-body          200 non-stream body that never ends (either word works on both)
//
// Options:
//
//	tokens=50             answer length (1..100000)
//	tool-calls            stream tool_calls deltas (arguments {"q":"tok1 ... "}) instead of content
//	frame-delay=20ms      per-model Options.FrameDelay
//	once, times=2         the fault hits only the first 1 or 2 attempts, then healthy;
//	                      also written as a suffix: 503-once, 503-times=2, cut=40-once
//
// Examples: "m|503", "m|429:ra=7", "m|503-once", "m|tokens=60|cut=40",
// "m|tool-calls|cut=2", "m|flap=30s/60s".
//
// Attempts are counted per model name exactly as sent; once/times and flap
// count from the first request (or from SetFault). Time faults wait on
// Options.Clock, so tests advance a fake clock instead of sleeping.
package upstream

// Grammar is the fault grammar, printed by `fakeupstream -help`.
const Grammar = `Model name grammar:  model[|fault][|option]...   (at most one fault)

Status faults:
  400..599             that status, realistic body (502/504: HTML)
  429:ra=7             ... with Retry-After: 7 (any status)
  context-length       400, error.code context_length_exceeded
  content-filter       400, error.code content_filter
  flap=30s             503 for 30 s after the first request, then healthy
  flap=30s/60s         503 for the first 30 s of every 60 s period
  reject-prefill       400 when the last message is from the assistant
  redirect             302 to http://127.0.0.2:1/elsewhere
Transport faults:
  reset                TCP RST before any response byte
  no-headers           never answer; wait for the client to leave
  short-body           Content-Length larger than the body, then abort
After 200 (streams; non-stream requests get the body analogue):
  slow-first-token=5s  headers at once, first token 5 s later
  stream-error         role chunk, then data: {"error":...}
  stream-error-event   same with event: error
  cut=40               40 tokens, then the connection dies (no finish, no [DONE])
  stall=10s            half the tokens, 10 s pause, the rest
  malformed            a "data: {not json" frame mid-stream
  no-done              finish_reason but no [DONE]
  error-body           200 with {"error":...} body
  bad-json             200 with a non-JSON body
  endless-frame        a data line that never ends
  endless-body         a non-stream body that never ends
  stream-error-after=3 3 content frames, then the dialect's in-stream error, then a clean end
  cut-before-finish    all content (blocks closed), then the connection dies before the finish
Dialect faults:
  model-not-ready      bedrock: 429 ModelNotReadyException
Options:
  tokens=50            answer length (default 8; 2*cut with cut)
  tool-calls           stream tool_calls deltas (Anthropic: a tool_use block) instead of content
  frame-delay=20ms     delay between frames for this model
  once | times=2       fault only the first 1 or 2 attempts (also 503-once, 503-times=2)
  stop=REASON          finish_reason (openai, azure) or stop_reason (anthropic, bedrock, vertex)
  error=TYPE           type of the in-stream error: overloaded_error, throttlingException, ...
  cache-write          Anthropic usage: cache_control tokens are written, not read

Examples: m|503  m|429:ra=7  m|503-once  m|tokens=60|cut=40  m|flap=30s/60s
Healthy answer: "tok1 tok2 ... tokN " (one token per stream chunk).
`
