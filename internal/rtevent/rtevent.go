package rtevent

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// Event types the gateway acts on.
const (
	TypeSessionCreated = "session.created"
	TypeError          = "error"
	TypeResponseDone   = "response.done"
)

// ErrNotEvent: the message is not a JSON object with a string "type".
var ErrNotEvent = errors.New("realtime event is not a JSON object with a string \"type\"")

// Event is what hopgate reads of one event.
type Event struct {
	Type string
	// Error: an error event's error.code and error.message (either may be
	// empty).
	ErrorCode, ErrorMessage string
	// ResponseID and usage of a response.done (Usage: a usage object was
	// present).
	ResponseID                string
	InputTokens, OutputTokens int64
	Usage                     bool
}

// Parse reads b, one event. Only an error's and a response.done's inner
// objects are walked; every other member is skipped.
func Parse(b []byte) (Event, error) {
	var ev Event
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' || !jsonscan.Valid(b) {
		return Event{}, ErrNotEvent
	}
	o := jsonscan.ValidMembers(b, i)
	var typ, resp, errObj []byte
	for {
		k, esc, vs, ve, ok := o.Next()
		if !ok {
			break
		}
		if esc {
			continue // none of the keys read here needs an escape
		}
		switch string(k) {
		case "type":
			typ = b[vs:ve]
		case "response":
			resp = b[vs:ve]
		case "error":
			errObj = b[vs:ve]
		}
	}
	t, ok := str(typ)
	if !ok || t == "" {
		return Event{}, ErrNotEvent
	}
	ev.Type = t
	switch t {
	case TypeError:
		members(errObj, func(k string, v []byte) {
			switch k {
			case "code":
				ev.ErrorCode, _ = str(v)
			case "message":
				ev.ErrorMessage, _ = str(v)
			}
		})
	case TypeResponseDone:
		members(resp, func(k string, v []byte) {
			switch k {
			case "id":
				ev.ResponseID, _ = str(v)
			case "usage":
				if len(v) > 0 && v[0] == '{' {
					ev.Usage = true
				}
				members(v, func(k string, v []byte) {
					switch k {
					case "input_tokens":
						ev.InputTokens = integer(v)
					case "output_tokens":
						ev.OutputTokens = integer(v)
					}
				})
			}
		})
	}
	return ev, nil
}

// members calls f for each unescaped key of the object v (already
// validated); anything but an object is no members.
func members(v []byte, f func(k string, v []byte)) {
	if len(v) == 0 || v[0] != '{' {
		return
	}
	o := jsonscan.ValidMembers(v, 0)
	for {
		k, esc, vs, ve, ok := o.Next()
		if !ok {
			return
		}
		if !esc {
			f(string(k), v[vs:ve])
		}
	}
}

// str is the JSON string v (unescaped), false when v is not a string.
func str(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return string(inner), true
}

// integer is the JSON number v as a non-negative int64 (0 for anything
// else: a count a provider got wrong is not worth failing a session for).
func integer(v []byte) int64 {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
