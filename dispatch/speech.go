package dispatch

import (
	"errors"
	"net/http"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/translate"
)

// Speech across providers (DESIGN.md §15): an OpenAI /v1/audio/speech
// request walks a chain that may hold elevenlabs entries. Such an entry is
// a codec beside the others, chosen per hop: the request is translated
// (the voice name to the entry's voice id in the URL, response_format to
// output_format, input to text), the answer is the provider's audio bytes,
// passed through like OpenAI's from the first bytes on (passthrough), and
// an error body is read in ElevenLabs' words. OpenAI entries of the same
// chain get the client's bytes untouched, as before.

// speechCall is the client's speech request as the walk reads it, parsed
// once per call when a chain to walk has an elevenlabs entry; nil for
// every other request (its methods are nil-safe).
type speechCall struct {
	s   translate.Speech
	err error // the body is not a speech request any provider can speak
}

// speechFor parses req's speech body when one of models has an
// elevenlabs entry (the OpenAI entries pass the client's bytes unread).
func speechFor(req *Request, models []*config.Model) *speechCall {
	if req.Operation != config.OpAudioSpeech {
		return nil
	}
	for _, m := range models {
		for _, e := range m.Chain {
			if elevenLabsEntry(e) {
				s, err := translate.ParseSpeech(req.Body)
				return &speechCall{s: s, err: err}
			}
		}
	}
	return nil
}

// elevenLabsEntry reports an entry the walk translates speech for.
func elevenLabsEntry(e config.Entry) bool { return e.Channel.Provider == config.ProviderElevenLabs }

// skip reports whether the walk skips entry for this request: an
// elevenlabs entry that cannot serve it (an unmapped voice, a format it
// has no output_format for) is the step "unsupported_request", nothing
// sent and no breaker told. The error is what the client gets when no
// entry served: a 400 naming the field, as a chain of such entries only
// cannot answer the request at all.
func (sp *speechCall) skip(req *Request, requestID string, entry config.Entry) *classify.HopError {
	if sp == nil || sp.err != nil || !elevenLabsEntry(entry) {
		return nil // a body that does not parse: the hop's translation refuses it, a final 400
	}
	param, why := translate.ElevenLabsUnsupported(sp.s, entry.Voices)
	if param == "" {
		return nil
	}
	e := &classify.HopError{Kind: classify.KindUnsupported, Status: http.StatusBadRequest, ContentType: "application/json",
		Cause: errors.New(why)}
	e.Body = errorBody(req, requestID, apierror.InvalidRequest(why+" (model "+req.Model.Name+")", param), "unsupported_request")
	return e
}

// fill sets the elevenlabs parts of a hop's upstream request: the voice
// id and output format of its URL.
func (sp *speechCall) fill(entry config.Entry, r *provider.Request) {
	if sp == nil || !elevenLabsEntry(entry) {
		return
	}
	r.VoiceID, r.OutputFormat = entry.Voices[sp.s.Voice], translate.ElevenLabsOutputFormat(sp.s)
}

// elevenLabsBody is the hop's body for an elevenlabs entry.
func (d *dialect) elevenLabsBody(sp *speechCall) ([]byte, error) {
	if sp == nil {
		return nil, errors.New("speech request not parsed for an elevenlabs entry")
	}
	if sp.err != nil {
		return nil, sp.err
	}
	body, dropped := translate.SpeechToElevenLabs(sp.s, d.entry.UpstreamModel)
	d.span.Dropped(dropped, nil)
	return body, nil
}

// notAudio handles a 2xx ElevenLabs answer that is not audio: ElevenLabs
// streams audio bytes only, so a JSON (or text) body at 200 is an error
// it put in the body (a proxy's page, a detail object), never an answer:
// the hop failed (retryable), and the next entry is tried.
func (d *dialect) notAudio(resp *http.Response, budget *overload.Budget) *classify.HopError {
	hold := overload.NewHold(budget)
	body, _ := readBounded(resp.Body, DefaultMaxErrorBody, resp.ContentLength, &hold)
	hold.Release()
	e := &classify.HopError{Kind: classify.KindErrorBody, Status: resp.StatusCode}
	if code, msg, ok := translate.ElevenLabsError(body); ok {
		e.Cause = errors.New(code + ": " + msg)
		d.span.Error(e.Cause)
	}
	return e
}
