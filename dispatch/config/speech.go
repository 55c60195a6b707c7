package config

import (
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// ElevenLabsBaseURL is an elevenlabs channel's default base_url: the API's
// scheme and host; hopgate appends /v1/text-to-speech/{voice_id}/stream.
const ElevenLabsBaseURL = "https://api.elevenlabs.io"

// voiceIDRE: a voice id goes into the upstream URL's path.
var voiceIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// voiceNameRE: an OpenAI voice name as a client sends it ("alloy").
var voiceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// voices reads a chain entry's voices: a mapping of OpenAI voice names to
// the provider's voice ids (DESIGN.md §15).
func (p *parser) voices(n *yaml.Node, what string) val[map[string]string] {
	n = deref(n)
	if n == nil || !p.visit(n) {
		return val[map[string]string]{}
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping of OpenAI voice names to voice ids, not %s", what, describe(n))
		return val[map[string]string]{set: true, node: n} // said once, not again as missing
	}
	out := make(map[string]string, len(n.Content)/2)
	first := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.str(n.Content[i], "a voice name in "+what)
		if !k.set {
			continue
		}
		if line, dup := first[k.v]; dup {
			p.errorf(k.node, "duplicate voice %q in %s (first set at line %d)", k.v, what, line)
			continue
		}
		first[k.v] = k.node.Line
		if !voiceNameRE.MatchString(k.v) {
			p.errorf(k.node, "voice name %q in %s may only contain letters, digits, '.', '_' and '-'", k.v, what)
			continue
		}
		id := p.str(n.Content[i+1], fmt.Sprintf("voice id of %q in %s", k.v, what))
		if !id.set {
			continue
		}
		if !voiceIDRE.MatchString(id.v) {
			p.errorf(id.node, "voice id of %q in %s must be the provider's id (letters, digits, '_' and '-'), not %q", k.v, what, id.v)
			continue
		}
		out[k.v] = id.v
	}
	if len(out) == 0 && len(n.Content) == 0 {
		p.errorf(n, "%s is empty: map at least one OpenAI voice name to a voice id, e.g. {alloy: 21m00Tcm4TlvDq8ikWAM}", what)
	}
	return val[map[string]string]{v: out, set: true, node: n}
}

// entryVoices checks a chain entry's voices against its channel: they
// belong on elevenlabs entries only, and an elevenlabs entry needs them
// (without a voice id there is no URL to send a request to).
func (p *parser) entryVoices(re *rawEntry, ch *Channel, ctx string) map[string]string {
	switch {
	case re.voices.set && ch.Provider != ProviderElevenLabs:
		p.errorf(re.voices.node, "voices in %s apply to provider %s channels only (channel %q is provider %s)",
			ctx, ProviderElevenLabs, ch.ID, ch.Provider)
		return nil
	case !re.voices.set && ch.Provider == ProviderElevenLabs:
		p.errorf(re.node, "%s (channel %q, provider %s) needs voices: map the OpenAI voice names clients send to voice ids, e.g. voices: {alloy: 21m00Tcm4TlvDq8ikWAM}",
			ctx, ch.ID, ch.Provider)
		return nil
	}
	return re.voices.v
}

// elevenLabsChannel checks an elevenlabs channel: the xi-api-key comes
// from api_key_env; base_url defaults to the public API.
func (p *parser) elevenLabsChannel(ch *Channel, rc *rawChannel, hasBase bool) {
	if !rc.apiKeyEnv.set {
		p.errorf(rc.node, "channel %q (provider %s) needs api_key_env: the xi-api-key credential", ch.ID, ch.Provider)
	}
	if rc.prefill.set && rc.prefill.v {
		p.errorf(rc.prefill.node, "prefill in channel %q does not apply to provider %s (it serves audio_speech only)", ch.ID, ch.Provider)
	}
	if !hasBase {
		ch.BaseURL = ElevenLabsBaseURL
	}
}

// speechChannels checks that a model whose chain has an elevenlabs entry
// serves audio_speech only: ElevenLabs has no chat, embeddings or
// transcription API behind hopgate's translation.
func (p *parser) speechChannels(m *Model, rm *rawModel, ctx string) {
	var el *Channel
	for _, e := range m.Chain {
		if e.Channel != nil && e.Channel.Provider == ProviderElevenLabs {
			el = e.Channel
			break
		}
	}
	if el == nil {
		return
	}
	node := rm.operations.node
	if node == nil {
		node = rm.node
	}
	for _, op := range m.Operations {
		if op != OpAudioSpeech {
			p.errorf(node, "%s serves %q, but channel %q of its chain (provider %s) serves %s only: set operations: [%s]",
				ctx, op, el.ID, el.Provider, OpAudioSpeech, OpAudioSpeech)
			return
		}
	}
}
