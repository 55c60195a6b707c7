// Package upstream is a fake model provider that fails the way real
// providers fail, in six dialects: OpenAI-compatible, Azure OpenAI,
// Anthropic Messages, Claude on AWS Bedrock, Claude on Google Vertex AI
// and ElevenLabs text-to-speech.
// It owns the fault grammar below, the deterministic healthy answers and
// the request log; it must not import any hopgate package, so every
// end-to-end test, the demo, the soak test and the benchmarks can use it as
// a neutral upstream.
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
// GET models. GET /v1/realtime (and Azure's /openai/realtime,
// /openai/v1/realtime) is a WebSocket realtime session with its own fault
// words (rt-refuse, rt-silent, rt-error, rt-close, rt-drop=N, rt-slow=D;
// see realtime.go), given in the model query parameter.
//
// # Dialects
//
// One Server answers every dialect; the URL path picks it (Request.Dialect).
// Each one authenticates, validates and fails in its provider's own way:
// error bodies, error headers and in-stream errors are that provider's.
//
//	openai     /v1/{chat/completions,completions,responses,embeddings,images/generations,
//	           audio/speech,audio/transcriptions,models} (also without /v1).
//	           Auth: "Authorization: Bearer Options.APIKey" when set. Errors
//	           {"error":{"message","type","param","code"}}.
//	azure      /openai/deployments/{deployment}/{chat/completions,completions,embeddings,
//	           images/generations,audio/speech,audio/transcriptions}?api-version=YYYY-MM-DD[-preview]
//	           (the deployment is the model; no api-version: 404, an unknown one: 400),
//	           /openai/responses?api-version=... (the Responses API is outside the
//	           deployments: the deployment is the body's model)
//	           and the v1 API /openai/v1/{...} (model in the body, api-version optional).
//	           Auth: api-key: Options.AzureAPIKey, or Authorization: Bearer
//	           Options.AzureADToken (Entra ID), or on v1 the key as a bearer
//	           token; else 401 {"error":{"code":"401","message"}}. Chat answers
//	           carry prompt_filter_results and per-choice content_filter_results;
//	           streams begin with a choice-less chunk holding the prompt's.
//	anthropic  /v1/messages. Auth: x-api-key (or Authorization: Bearer, as the
//	           Go SDK v2 sends it) = Options.AnthropicAPIKey; anthropic-version
//	           header required. Errors {"type":"error","error":{"type","message"},
//	           "request_id"} with a request-id header; x-should-retry on 429/5xx.
//	bedrock    /model/{modelId}/invoke and /model/{modelId}/invoke-with-response-stream;
//	           modelId is one escaped path segment (model id, inference profile
//	           or ARN). Auth: SigV4 (service bedrock, Options.AWSRegion) verified
//	           by re-signing with Options.AWSAccessKeyID/AWSSecretAccessKey: an
//	           unknown key is 403 UnrecognizedClientException, a bad signature or
//	           scope 403 InvalidSignatureException. Body: Messages JSON with
//	           anthropic_version "bedrock-2023-05-31", no model, no stream. Errors:
//	           X-Amzn-Errortype: {Exception}:... and {"message"}. Streams are
//	           application/vnd.amazon.eventstream: one "chunk" event per
//	           Anthropic event ({"bytes":base64,"p":...}); in-stream errors are
//	           exception messages (:exception-type, e.g. throttlingException).
//	vertex     /v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict
//	           and :streamRawPredict (SSE as anthropic). Auth: Authorization:
//	           Bearer of a token minted by POST /token and not expired on
//	           Options.Clock (401 UNAUTHENTICATED, ErrorInfo reason
//	           ACCESS_TOKEN_EXPIRED / ACCESS_TOKEN_TYPE_UNSUPPORTED /
//	           CREDENTIALS_MISSING); project = Options.GoogleProject (else 403
//	           PERMISSION_DENIED). Body: Messages JSON with anthropic_version
//	           "vertex-2023-10-16", no model. Front-end statuses (401, 403, 404,
//	           429 RESOURCE_EXHAUSTED, 500, 503, 504) in Google's shape
//	           {"error":{"code","message","status"}}, model errors in Anthropic's.
//	elevenlabs POST /v1/text-to-speech/{voice_id}[/stream]?output_format=F with
//	           {"text","model_id"}: the audio (Content-Type by F: audio/mpeg, audio/opus,
//	           audio/pcm; another F is a 422 {"detail":[{"loc","msg","type"}]}); model_id
//	           picks the fault. Auth: xi-api-key = Options.APIKey when set (401
//	           invalid_api_key). Errors {"detail":{"status","message"}}: 429 system_busy,
//	           or 429|error=too_many_concurrent_requests; 5xx internal_server_error;
//	           error-body is such a detail under 200.
//	oauth      POST /token: Google's token endpoint for the JWT-bearer grant of
//	           a service-account key (ServiceAccountJSON, WriteServiceAccountFile):
//	           the RS256 assertion must verify with the key the fake minted, its
//	           aud must be the token_uri; the answer is {"access_token",
//	           "expires_in","token_type":"Bearer"} valid Options.GoogleTokenLifetime.
//	           Faulted and counted as the model TokenModel.
//
// The anthropic, bedrock and vertex dialects check a request as the API
// does (max_tokens required, messages roles user/assistant, non-empty text
// blocks, base64 images of the four media types and on Bedrock/Vertex no
// URL images, every tool_result paired with a tool_use of the previous
// message and vice versa, thinking budget >= 1024 and < max_tokens, no
// trailing whitespace in a final assistant prefill, thinking blocks signed
// by a fake of the same Options.Name, and on Bedrock and Vertex no beta
// outside Options.CloudBetas) and keep the decoded body in
// Request.Anthropic. The answer is Token(1)..Token(n) as one text
// block, continuing an assistant prefill; max_tokens below n truncates it
// (stop_reason max_tokens); a stop sequence occurring in it ends it there
// (stop_sequence); a request enabling thinking gets a thinking block
// (ThinkingText, one thinking_delta per word, then a signature_delta) first.
// Streams are message_start (usage included), content_block_start, ping,
// the deltas, content_block_stop, message_delta (stop_reason, usage with
// cache counts), message_stop. Prompt words in blocks marked cache_control
// are reported as cache_read_input_tokens (cache-write: as
// cache_creation_input_tokens).
//
// The fault words mean the same in every dialect, in its shape: a status is
// that status with the dialect's body (Anthropic 529 overloaded_error,
// Bedrock 429 ThrottlingException, Vertex 429 RESOURCE_EXHAUSTED, ...);
// context-length is the provider's "too long" 400 (Anthropic and Vertex:
// "prompt is too long: 210000 tokens > 200000 maximum", Bedrock: the same
// as a ValidationException); stream errors are "data: {"error"}" or
// "event: error" (openai, azure), "event: error" with an Anthropic error
// after message_start (anthropic, vertex), an exception message (bedrock);
// no-done leaves out [DONE] or message_stop; malformed is a frame that is
// not JSON (bedrock: a message with a bad CRC); slow-first-token sends the
// head (role chunk after a keep-alive; message_start and ping) at once and
// the first delta late. A fault that does not exist in a dialect
// (content-filter on Claude, model-not-ready off Bedrock, a stop reason or
// error type of another family) is a 400 unknown_fault there.
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
//	                      (bedrock: an event-stream message whose declared length never arrives)
//	endless-body          200 non-stream body that never ends (either word works on both)
//	stream-error-after=3  3 content frames, then the dialect's in-stream error, then a clean end
//	                      (non-stream: error-body)
//	cut-before-finish     all content, blocks closed, then the connection dies before the finish
//	                      (anthropic: before message_delta; with tool-calls, right after the
//	                      tool_use block; non-stream: half the body)
//
// Dialect faults:
//
//	model-not-ready       bedrock: 429 ModelNotReadyException
//	429:ra=7 on azure     also retry-after-ms: 7000
//	content-filter on azure  Azure's exact 400 (code content_filter, innererror
//	                      ResponsibleAIPolicyViolation, content_filter_result)
//
// Options:
//
//	tokens=50             answer length (1..100000)
//	tool-calls            stream tool_calls deltas (arguments {"q":"tok1 ... "}) instead of content;
//	                      anthropic family: a tool_use block for the tool tool_choice names or the
//	                      first tool (a request without tools is a 400), input in several
//	                      input_json_delta pieces, stop_reason tool_use
//	frame-delay=20ms      per-model Options.FrameDelay
//	header-delay=2s       wait 2 s (Clock) before answering anything, the fault included:
//	                      a provider queueing requests (header latency, "2s then 503")
//	once, times=2         the fault hits only the first 1 or 2 attempts, then healthy;
//	                      also written as a suffix: 503-once, 503-times=2, cut=40-once
//	stop=REASON           finish_reason (openai, azure: stop, length, tool_calls, content_filter,
//	                      function_call; azure content_filter also flags violence) or stop_reason
//	                      (anthropic, bedrock, vertex: end_turn, max_tokens, stop_sequence,
//	                      tool_use, pause_turn, refusal, model_context_window_exceeded;
//	                      stop_sequence reports the request's first stop sequence)
//	error=TYPE            the in-stream error's type: openai/azure error.type (default
//	                      server_error); anthropic/vertex an Anthropic error type (default
//	                      overloaded_error); bedrock an exception event type (default
//	                      internalServerException; throttlingException, modelStreamErrorException,
//	                      validationException, modelTimeoutException, serviceUnavailableException)
//	cache-write           anthropic family: cache_control tokens reported as written, not read
//
// Examples: "m|503", "m|429:ra=7", "m|503-once", "m|tokens=60|cut=40",
// "m|tool-calls|cut=2", "m|flap=30s/60s", "claude|529",
// "claude|stream-error-event", "claude|tool-calls|cut-before-finish",
// "anthropic.claude-v2|stream-error-after=2|error=throttlingException",
// "claude@2025|429", "gpt-4o|content-filter", "claude|stop=refusal".
//
// Attempts are counted per model name exactly as sent (the Azure
// deployment, Bedrock model id or Vertex model when the URL names it);
// once/times and flap count from the first request (or from SetFault).
// Time faults wait on Options.Clock, so tests advance a fake clock instead
// of sleeping.
package upstream

// Grammar is the fault grammar, printed by `fakeupstream -help`.
const Grammar = `Model name grammar:  model[|fault][|option]...   (at most one fault)

Status faults:
  400..599             that status, realistic body (502/504: HTML)
  429:ra=7             ... with Retry-After: 7 (any status; azure also retry-after-ms)
  context-length       400, error.code context_length_exceeded (Claude: "prompt is too long")
  content-filter       400, error.code content_filter (azure: Azure's exact shape)
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
  header-delay=2s      wait before answering anything (the fault's answer too)
  once | times=2       fault only the first 1 or 2 attempts (also 503-once, 503-times=2)
  stop=REASON          finish_reason (openai, azure) or stop_reason (anthropic, bedrock, vertex)
  error=TYPE           type of the in-stream error: overloaded_error, throttlingException, ...
  cache-write          Anthropic usage: cache_control tokens are written, not read

Examples: m|503  m|429:ra=7  m|503-once  m|tokens=60|cut=40  m|flap=30s/60s
          claude|529  claude|stream-error-event  claude|tool-calls|cut-before-finish
          anthropic.claude-v2|stream-error-after=2|error=throttlingException
Healthy answer: "tok1 tok2 ... tokN " (one token per stream chunk).

Dialects, by URL path (faults mean the same in each, in its provider's shape):
  openai     /v1/chat/completions, /v1/completions, /v1/responses, ...
  azure      /openai/deployments/{deployment}/...?api-version=...  /openai/responses?api-version=...
             /openai/v1/...
  anthropic  /v1/messages                  (x-api-key, anthropic-version)
  bedrock    /model/{id}/invoke[-with-response-stream]   (SigV4; event-stream)
  vertex     /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict
             | :streamRawPredict           (bearer token from POST /token)
`
