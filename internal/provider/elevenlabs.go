package provider

import (
	"net/url"
	"strings"
)

// elevenLabsURL is ElevenLabs' streaming text-to-speech endpoint for r:
// {base}/v1/text-to-speech/{voice_id}/stream?output_format=… (DESIGN.md
// §15). The stream variant answers with audio as it is generated, so the
// first bytes arrive long before the whole clip is synthesized.
func elevenLabsURL(base string, r *Request) string {
	var b strings.Builder
	b.Grow(len(base) + len(r.VoiceID) + len(r.OutputFormat) + 48)
	b.WriteString(base)
	b.WriteString("/v1/text-to-speech/")
	b.WriteString(url.PathEscape(r.VoiceID))
	b.WriteString("/stream")
	if r.OutputFormat != "" {
		b.WriteString("?output_format=")
		b.WriteString(url.QueryEscape(r.OutputFormat))
	}
	return b.String()
}
