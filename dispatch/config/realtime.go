package config

import (
	"time"

	"go.yaml.in/yaml/v3"
)

// OpRealtime is the operation of GET /v1/realtime (DESIGN.md §15): a
// WebSocket session, served by openai and azure channels only.
const OpRealtime = "realtime"

// Realtime bounds realtime sessions (top-level key realtime).
type Realtime struct {
	// HoldBytes bounds the client events held before a session commits
	// (replayed to the committed channel), on the overload budget; before
	// the commit it is also the largest single client event.
	HoldBytes int64
	// MaxEventBytes is the largest single event either side may send
	// once the session committed (an upstream's first events, before it,
	// are bounded by the engine's frame limit). OpenAI bounds a client
	// event at 15 MiB; conversation.item.retrieved carries a whole item's
	// audio, so the default is larger than one frame of a stream.
	MaxEventBytes int64
	// MaxSession bounds one session's life.
	MaxSession time.Duration
	// PingInterval is how long a side of a committed session (the client,
	// the channel) may stay silent before hopgate pings it; 0: never.
	// PingTimeout is how long its pong may take: a side that answers
	// neither a ping nor with an event in that time is gone (a half-open
	// socket), and the session ends (docs/voice.md, keepalive).
	PingInterval, PingTimeout time.Duration
}

// Defaults of the realtime block.
const (
	DefaultRealtimeHoldBytes     = 1 << 20
	DefaultRealtimeMaxEventBytes = 16 << 20
	DefaultRealtimeMaxSession    = 60 * time.Minute
	DefaultRealtimePingInterval  = 15 * time.Second
	DefaultRealtimePingTimeout   = 10 * time.Second
)

type rawRealtime struct {
	holdBytes     val[int64]
	maxEventBytes val[int64]
	maxSession    val[time.Duration]
	pingInterval  val[time.Duration]
	pingTimeout   val[time.Duration]
}

func (p *parser) realtime(n *yaml.Node) rawRealtime {
	var r rawRealtime
	p.mapping(n, "realtime", fields{
		"hold_bytes":      func(_, v *yaml.Node) { r.holdBytes = p.integer(v, "hold_bytes in realtime", 1024) },
		"max_event_bytes": func(_, v *yaml.Node) { r.maxEventBytes = p.integer(v, "max_event_bytes in realtime", 1024) },
		"max_session":     func(_, v *yaml.Node) { r.maxSession = p.duration(v, "max_session in realtime", true) },
		"ping_interval":   func(_, v *yaml.Node) { r.pingInterval = p.duration(v, "ping_interval in realtime", false) },
		"ping_timeout":    func(_, v *yaml.Node) { r.pingTimeout = p.duration(v, "ping_timeout in realtime", true) },
	})
	return r
}

func (r rawRealtime) resolve() Realtime {
	return Realtime{
		HoldBytes:     r.holdBytes.or(DefaultRealtimeHoldBytes),
		MaxEventBytes: r.maxEventBytes.or(DefaultRealtimeMaxEventBytes),
		MaxSession:    r.maxSession.or(DefaultRealtimeMaxSession),
		PingInterval:  r.pingInterval.or(DefaultRealtimePingInterval),
		PingTimeout:   r.pingTimeout.or(DefaultRealtimePingTimeout),
	}
}

// realtimeChannels checks that every channel of a model serving realtime
// speaks a realtime API (openai, azure); families reports the
// Anthropic-family ones (they serve chat only).
func (p *parser) realtimeChannels(m *Model, rm *rawModel, ctx string) {
	serves := false
	for _, op := range m.Operations {
		serves = serves || op == OpRealtime
	}
	if !serves {
		return
	}
	for _, e := range m.Chain {
		if ch := e.Channel; ch != nil && ch.Provider != ProviderOpenAI && ch.Provider != ProviderAzure && !AnthropicFamily(ch.Provider) {
			p.errorf(rm.operations.node, "%s serves %q, but channel %q of its chain (provider %s) has no realtime API (openai and azure do)",
				ctx, OpRealtime, ch.ID, ch.Provider)
		}
	}
}
