package api

import (
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
)

// route describes one OpenAI-compatible endpoint served through the chain.
type route struct {
	Pattern   string // mux pattern, e.g. "/v1/chat/completions"
	Operation string // config operation name the model must serve
	Upstream  string // path appended to the channel base URL
	Events    dispatch.EventStyle
	// Streams: the body's "stream" field selects an SSE answer that goes
	// through the stream gate. On other routes "stream": true is refused at
	// the front door: the gate has no classifier for their events, and a
	// stream it cannot judge would fail over from healthy channels.
	Streams bool
	// Multipart: the body is multipart/form-data (uploads); the model is a
	// form field. Otherwise the body is one JSON object.
	Multipart bool
	// Binary: a 2xx answer may be binary (audio), streamed through as it
	// comes instead of buffered and inspected.
	Binary bool
	// CountTokens: Anthropic's token count (dispatch/count.go): the chain
	// is walked, nothing is charged.
	CountTokens bool
}

// routes are the proxied endpoints. Every one goes through L1, L2, L4 and,
// where it streams, L3. docs/endpoints.md documents them; keep it in step.
var routes = []route{
	{Pattern: "/v1/chat/completions", Operation: config.OpChat, Upstream: "/chat/completions", Events: dispatch.ChatEvents, Streams: true},
	{Pattern: "/v1/completions", Operation: config.OpCompletions, Upstream: "/completions", Events: dispatch.ChatEvents, Streams: true},
	{Pattern: "/v1/responses", Operation: config.OpResponses, Upstream: "/responses", Events: dispatch.ResponsesEvents, Streams: true},
	{Pattern: "/v1/embeddings", Operation: config.OpEmbeddings, Upstream: "/embeddings"},
	{Pattern: "/v1/images/generations", Operation: config.OpImages, Upstream: "/images/generations"},
	{Pattern: "/v1/audio/speech", Operation: config.OpAudioSpeech, Upstream: "/audio/speech", Binary: true},
	{Pattern: "/v1/audio/transcriptions", Operation: config.OpAudioTranscriptions, Upstream: "/audio/transcriptions", Multipart: true},
	// Anthropic's Messages API (DESIGN.md §8): the same chat models and
	// chains; an OpenAI-family channel gets the request translated to
	// /chat/completions. Errors and in-band errors in Anthropic's shape.
	{Pattern: messagesPath, Operation: config.OpChat, Upstream: "/chat/completions", Events: dispatch.MessagesEvents, Streams: true},
	// Claude Code asks before it compacts (?beta=true: the query is not
	// part of the pattern). Served by the chat models' chains (DESIGN.md §14).
	{Pattern: messagesPath + "/count_tokens", Operation: config.OpChat, Upstream: "/chat/completions", Events: dispatch.MessagesEvents, CountTokens: true},
}

// messagesPath is Anthropic's Messages endpoint.
const messagesPath = "/v1/messages"
