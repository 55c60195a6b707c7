package provider

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"

	"github.com/hopgate/hopgate/internal/sse"
)

// EventFrames reads Bedrock's InvokeModelWithResponseStream answer, the AWS
// event-stream binary framing decoded by the SDK's decoder, and yields one
// SSE frame per Anthropic event it carries: a chunk event's payload is
// {"bytes":"<base64 of one Anthropic stream event>"}; an exception (or
// error) message becomes an Anthropic-shaped error event, so the gate and
// the transcoders read Bedrock like Anthropic's own SSE. Raw is the frame
// as SSE ("event: …\ndata: …\n\n"), what an Anthropic client is sent.
type EventFrames struct {
	br      *bufio.Reader
	dec     *eventstream.Decoder
	payload []byte
	raw     []byte
	max     int
	err     error
}

// NewEventFrames reads body; a message whose payload exceeds maxFrame is
// an error (sse.ErrFrameTooLarge), as an SSE frame would be.
func NewEventFrames(body io.Reader, maxFrame int) *EventFrames {
	return &EventFrames{br: bufio.NewReaderSize(body, 16<<10), dec: eventstream.NewDecoder(), max: maxFrame}
}

// Buffered reports whether bytes of a next message are already read.
func (f *EventFrames) Buffered() bool { return f.br.Buffered() > 0 }

// Next returns the next Anthropic event as an SSE frame; io.EOF at a clean
// end between messages. Frames are valid until the next call.
func (f *EventFrames) Next() (sse.Frame, error) {
	if f.err != nil {
		return sse.Frame{}, f.err
	}
	for {
		if _, err := f.br.Peek(1); err != nil {
			f.err = err
			return sse.Frame{}, err
		}
		if err := f.checkPrelude(); err != nil {
			f.err = err
			return sse.Frame{}, err
		}
		msg, err := f.dec.Decode(f.br, f.payload[:0])
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // a message cut short
			}
			f.err = fmt.Errorf("bedrock event stream: %w", err)
			return sse.Frame{}, f.err
		}
		f.payload = msg.Payload
		name, data, ok := f.event(msg)
		if !ok {
			continue // an event type hopgate has no use for
		}
		f.raw = append(f.raw[:0], "event: "...)
		f.raw = append(f.raw, name...)
		f.raw = append(f.raw, "\ndata: "...)
		f.raw = append(f.raw, data...)
		f.raw = append(f.raw, "\n\n"...)
		return sse.Frame{Raw: f.raw, Event: name, Data: data, HasData: true}, nil
	}
}

// messageOverhead is an event-stream message's bytes besides its headers
// and payload: the prelude (total length, headers length, prelude CRC) and
// the message CRC.
const messageOverhead = 16

// checkPrelude refuses a message whose declared headers or payload exceed
// the frame bound before the SDK's decoder reads it: the decoder has no
// bound of its own and buffers whatever length the upstream declares (up
// to 4 GiB; a headers length above the total makes its payload length
// wrap around), so the bound must hold before a byte of the message is
// buffered.
func (f *EventFrames) checkPrelude() error {
	if f.max <= 0 {
		return nil
	}
	p, err := f.br.Peek(8)
	if err != nil {
		return nil // a prelude cut short: the decoder reports it
	}
	total, headers := int64(binary.BigEndian.Uint32(p)), int64(binary.BigEndian.Uint32(p[4:]))
	if total < messageOverhead+headers {
		return fmt.Errorf("bedrock event stream: a message of %d bytes declares %d bytes of headers", total, headers)
	}
	if headers > int64(f.max) || total-messageOverhead-headers > int64(f.max) {
		return sse.ErrFrameTooLarge
	}
	return nil
}

// event is the Anthropic event one message carries.
func (f *EventFrames) event(msg eventstream.Message) (name string, data []byte, ok bool) {
	str := func(h string) string {
		if v := msg.Headers.Get(h); v != nil {
			return v.String()
		}
		return ""
	}
	switch str(eventstreamapi.MessageTypeHeader) {
	case eventstreamapi.EventMessageType:
		if str(eventstreamapi.EventTypeHeader) != "chunk" {
			return "", nil, false
		}
		var chunk struct {
			Bytes string `json:"bytes"`
		}
		if json.Unmarshal(msg.Payload, &chunk) != nil {
			return "error", errorEvent("api_error", "bedrock sent a chunk that is not JSON"), true
		}
		ev, err := base64.StdEncoding.DecodeString(chunk.Bytes)
		if err != nil {
			return "error", errorEvent("api_error", "bedrock sent a chunk that is not base64"), true
		}
		var head struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(ev, &head)
		return head.Type, ev, true
	case eventstreamapi.ExceptionMessageType:
		var info struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(msg.Payload, &info)
		code := str(eventstreamapi.ExceptionTypeHeader)
		if code == "" {
			code = "UnknownError"
		}
		if info.Message == "" {
			info.Message = code
		}
		return "error", errorEvent(code, info.Message), true
	case eventstreamapi.ErrorMessageType:
		code, m := str(eventstreamapi.ErrorCodeHeader), str(eventstreamapi.ErrorMessageHeader)
		if code == "" {
			code = "UnknownError"
		}
		if m == "" {
			m = code
		}
		return "error", errorEvent(code, m), true
	}
	return "", nil, false
}

// errorEvent is an Anthropic error event's data.
func errorEvent(typ, message string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}})
	return b
}
