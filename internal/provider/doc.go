// Package provider knows how hopgate speaks to each provider family of
// DESIGN.md §8 (openai, azure, anthropic, bedrock, vertex): the upstream
// URL of a request, the credential and headers (a Bearer key, Azure's
// api-key or an Entra ID token, Anthropic's x-api-key, SigV4 from the AWS
// default credential chain, an OAuth token from Google's Application
// Default Credentials), the body conventions of the clouds that serve
// Claude (the model in the URL, anthropic_version in the body, the
// allow-listed betas), Bedrock's event-stream framing read as SSE frames,
// and the provider's own words for an error answer.
//
// It does not translate between dialects (package translate), classify
// results or decide anything about a request: every hop still goes
// through the dispatch engine's transport, timeouts, gate, spans and
// breakers. The cloud SDKs are used for what they own: SigV4 signing and
// the event-stream decoder (aws-sdk-go-v2), token sources
// (golang.org/x/oauth2/google), Entra ID (azidentity).
//
// It is internal: its API follows the engine's needs.
package provider
