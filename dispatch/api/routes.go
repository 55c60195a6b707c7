package api

import "github.com/hopgate/hopgate/dispatch"

// route describes one OpenAI-compatible endpoint served through the chain.
type route struct {
	Pattern   string // mux pattern, e.g. "/v1/chat/completions"
	Operation string // config operation name the model must serve
	Upstream  string // path appended to the channel base URL
	Events    dispatch.EventStyle
}

// routes are the proxied endpoints. Every one goes through L1, L2, L4 and,
// where it streams, L3.
var routes = []route{
	{Pattern: "/v1/chat/completions", Operation: "chat", Upstream: "/chat/completions", Events: dispatch.ChatEvents},
}
