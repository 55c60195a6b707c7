package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The realtime dialect (OpenAI Realtime over WebSocket): GET
// /v1/realtime?model=M (openai), /openai/realtime?api-version=&deployment=M
// and /openai/v1/realtime?model=M (azure). The model names the session's
// fault after a "|", the ways real providers fail:
//
//	m|rt-refuse        the upgrade is refused: 503 with Retry-After: 1
//	m|rt-refuse=429    ... with that status (429 and 503 carry Retry-After: 1)
//	m|rt-silent        the upgrade is accepted, and nothing is ever sent
//	m|rt-stall         one event that is not session.created (a relay's
//	                   keep-alive), then nothing
//	m|rt-error         an error event first (server_error), then close 1011
//	m|rt-close         the upgrade is accepted, then closed (1011) at once
//	m|rt-drop=N        session.created, then the socket is cut (no close
//	                   frame) after N client events were answered
//	m|rt-end=N         session.created, then a close frame 1000 (the session
//	                   ended on purpose, as at OpenAI's session limit) after
//	                   N client events were answered
//	m|rt-hang=N        session.created, then after N client events were
//	                   answered nothing more is read or sent, pings
//	                   included, while the socket stays open: the host
//	                   behind it is gone and no FIN came (a half-open socket)
//	m|rt-slow=D        session.created only after D (on the fake's clock)
//	m|rt-repeat-done   every response.done is sent twice (a replay)
//
// A healthy session sends session.created, answers session.update with
// session.updated, conversation.item.create with conversation.item.created,
// conversation.item.retrieve with conversation.item.retrieved carrying
// the item as it was created (its audio included: the largest event of a
// session), and response.create with response.created, one
// response.output_audio_transcript.delta and response.done (id resp_<n>,
// usage 10 in / 20 out); other client events get no answer.

// realtimePath reports whether p is a realtime endpoint of a dialect.
func realtimePath(p string) bool {
	return p == "/v1/realtime" || p == "/openai/realtime" || p == "/openai/v1/realtime"
}

// rtFault is a realtime session's fault.
type rtFault struct {
	kind   string // "", refuse, silent, stall, error, close, drop, end, hang, slow, repeat-done
	status int
	n      int
	delay  time.Duration
}

func parseRTFault(model string) (string, rtFault, bool) {
	base, spec, _ := strings.Cut(model, "|")
	if spec == "" {
		return base, rtFault{}, true
	}
	word, arg, _ := strings.Cut(spec, "=")
	f := rtFault{kind: strings.TrimPrefix(word, "rt-")}
	switch word {
	case "rt-refuse":
		f.status = http.StatusServiceUnavailable
		if arg != "" {
			n, err := strconv.Atoi(arg)
			if err != nil || n < 400 || n > 599 {
				return "", f, false
			}
			f.status = n
		}
	case "rt-silent", "rt-stall", "rt-error", "rt-close", "rt-repeat-done":
	case "rt-drop", "rt-end", "rt-hang":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 0 {
			return "", f, false
		}
		f.n = n
	case "rt-slow":
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return "", f, false
		}
		f.delay = d
	default:
		return "", f, false
	}
	return base, f, true
}

// rtSeq numbers the fake's realtime sessions and responses.
var rtSeq atomic.Int64

// serveRealtime answers a realtime upgrade.
func (s *Server) serveRealtime(w http.ResponseWriter, r *http.Request) {
	d := DialectOpenAI
	model := r.URL.Query().Get("model")
	if strings.HasPrefix(r.URL.Path, "/openai/") {
		d = DialectAzure
		if r.URL.Path == "/openai/realtime" {
			model = r.URL.Query().Get("deployment")
		}
	}
	a := s.record(r, Request{Model: model, Dialect: d})
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(a.req)
	}
	w.Header().Set("X-Fake-Upstream", s.opts.Name)
	if !s.realtimeAuthorized(r, d) {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	if d == DialectAzure && r.URL.Path == "/openai/realtime" && r.URL.Query().Get("api-version") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "missing_api_version", "api-version query parameter is required")
		return
	}
	base, f, ok := parseRTFault(a.req.Effective)
	if !ok || base == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown_fault", "fakeupstream: bad realtime model "+strconv.Quote(model))
		return
	}
	if f.kind == "refuse" {
		if f.status == http.StatusTooManyRequests || f.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, f.status, "server_error", "upstream_unavailable", "fakeupstream: the realtime service is unavailable in this region")
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"realtime"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			_ = c.CloseNow()
		case <-ctx.Done():
		}
	}()
	switch f.kind {
	case "silent":
		// Reads (and answers pings) until the peer goes, says nothing.
		<-c.CloseRead(ctx).Done()
		return
	case "stall":
		_ = writeRT(ctx, c, map[string]any{"type": "keepalive", "event_id": "evt_ka"})
		<-c.CloseRead(ctx).Done()
		return
	case "error":
		_ = writeRT(ctx, c, map[string]any{"type": "error", "event_id": "evt_err",
			"error": map[string]any{"type": "server_error", "code": "server_error", "message": "fakeupstream: the session could not be created"}})
		_ = c.Close(websocket.StatusInternalError, "session failed")
		return
	case "close":
		_ = c.Close(websocket.StatusInternalError, "")
		return
	case "slow":
		select {
		case <-s.clock.After(f.delay):
		case <-ctx.Done():
			return
		case <-s.closed:
			return
		}
	}
	id := "sess_" + s.opts.Name + "_" + strconv.FormatInt(rtSeq.Add(1), 10)
	if writeRT(ctx, c, map[string]any{"type": "session.created", "event_id": "evt_0",
		"session": map[string]any{"id": id, "object": "realtime.session", "type": "realtime", "model": base}}) != nil {
		return
	}
	answered := 0
	items := map[string]json.RawMessage{}
	for {
		if f.kind == "hang" && answered >= f.n {
			// Not reading is what makes it half-open: no pong, no close
			// frame read. It ends when the fake does.
			select {
			case <-ctx.Done():
			case <-s.closed:
			}
			return
		}
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if f.kind == "drop" && answered >= f.n {
			return // CloseNow: the socket is cut, no close frame
		}
		if f.kind == "end" && answered >= f.n {
			_ = c.Close(websocket.StatusNormalClosure, "session ended")
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var ev struct {
			Type   string          `json:"type"`
			Item   json.RawMessage `json:"item"`
			ItemID string          `json:"item_id"`
		}
		_ = json.Unmarshal(b, &ev)
		var out []map[string]any
		switch ev.Type {
		case "session.update":
			out = append(out, map[string]any{"type": "session.updated", "session": map[string]any{"id": id, "type": "realtime", "model": base}})
		case "conversation.item.create":
			var it struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(ev.Item, &it)
			if it.ID == "" {
				it.ID = "item_" + strconv.Itoa(answered)
			}
			if len(ev.Item) > 0 {
				items[it.ID] = ev.Item
			}
			out = append(out, map[string]any{"type": "conversation.item.created", "item": map[string]any{"id": it.ID, "type": "message"}})
		case "conversation.item.retrieve":
			if item, ok := items[ev.ItemID]; ok {
				out = append(out, map[string]any{"type": "conversation.item.retrieved", "item": item})
			} else {
				out = append(out, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error",
					"code": "item_not_found", "message": "fakeupstream: no item " + strconv.Quote(ev.ItemID)}})
			}
		case "response.create":
			rid := "resp_" + s.opts.Name + "_" + strconv.FormatInt(rtSeq.Add(1), 10)
			out = append(out,
				map[string]any{"type": "response.created", "response": map[string]any{"id": rid, "object": "realtime.response", "status": "in_progress"}},
				map[string]any{"type": "response.output_audio_transcript.delta", "response_id": rid, "delta": "hello from " + s.opts.Name},
				map[string]any{"type": "response.done", "response": map[string]any{"id": rid, "object": "realtime.response", "status": "completed",
					"usage": map[string]any{"total_tokens": 30, "input_tokens": 10, "output_tokens": 20}}})
			if f.kind == "repeat-done" {
				out = append(out, out[len(out)-1])
			}
		}
		for _, e := range out {
			if writeRT(ctx, c, e) != nil {
				return
			}
		}
		answered++
	}
}

func writeRT(ctx context.Context, c *websocket.Conn, v any) error {
	b, _ := json.Marshal(v)
	return c.Write(ctx, websocket.MessageText, b)
}

// realtimeAuthorized checks the dialect's credential on an upgrade.
func (s *Server) realtimeAuthorized(r *http.Request, d Dialect) bool {
	if d == DialectAzure {
		k := r.Header.Get("Api-Key")
		return k == s.opts.AzureAPIKey || r.Header.Get("Authorization") == "Bearer "+s.opts.AzureADToken ||
			r.Header.Get("Authorization") == "Bearer "+s.opts.AzureAPIKey
	}
	return s.opts.APIKey == "" || r.Header.Get("Authorization") == "Bearer "+s.opts.APIKey
}
