package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/translate"
)

// The Responses pass-through row: the fast upstream also speaks the
// Responses API at /v1/responses, answering with exactly the bytes the
// translating path gives its client (computed at start by
// internal/translate from the upstream's own Anthropic answer). hopgate on
// the OpenAI channel passes them through, so
// translating-responses / passthrough-responses is what the translation
// costs a Responses client, as translating / hopgate is for chat, with the
// bytes on the wire the same on both sides of each ratio. (A Responses
// stream is about a third larger than the same answer as chat chunks: it
// repeats the text in its done events.)

// responsesCreated is the created_at the precomputed answers carry.
const responsesCreated = 1700000000

// responsesAnswers translates the Anthropic stream events and message
// into the Responses stream (one SSE frame per translated event, in order)
// and the Responses object.
func responsesAnswers(events [][]byte, message []byte) (frames [][]byte, object []byte, err error) {
	tr := translate.NewMessagesToResponsesStream(responsesCreated)
	rd := sse.NewReader(bytes.NewReader(bytes.Join(events, nil)), 0)
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		out, _ := tr.Event(nil, f.Event, f.Data)
		if len(out) > 0 {
			frames = append(frames, out)
		}
	}
	if len(frames) == 0 || !bytes.Contains(frames[len(frames)-1], []byte("response.completed")) {
		return nil, nil, fmt.Errorf("the translated stream does not end with response.completed")
	}
	object, _, err = translate.MessageToResponse(message, responsesCreated, "")
	return frames, object, err
}

// respStreamBytes and chatStreamBytes are the sizes of the two streams a
// client of the translating path receives (the Responses one, and the
// chat one the pass-through upstream sends).
func respStreamBytes() int { return len(bytes.Join(newFastUpstream().respFrames, nil)) }

func chatStreamBytes() int { return len(newFastUpstream().burst) }
