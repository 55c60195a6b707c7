package config

import (
	"testing"
	"time"
)

// The realtime block's defaults are DESIGN.md §15's (1 MiB held, 60m per
// session), and its keys reach the resolved Config.
func TestRealtimeBlock(t *testing.T) {
	if r := mustParse(t, string(skeleton("", "", "")), env()).Realtime; r.HoldBytes != 1<<20 || r.MaxEventBytes != 16<<20 || r.MaxSession != time.Hour ||
		r.PingInterval != 15*time.Second || r.PingTimeout != 10*time.Second {
		t.Errorf("realtime defaults = %+v", r)
	}
	r := mustParse(t, string(skeleton("", "", "realtime: {hold_bytes: 4096, max_event_bytes: 65536, max_session: 5m, ping_interval: 0s, ping_timeout: 3s}\n")), env()).Realtime
	if r.HoldBytes != 4096 || r.MaxEventBytes != 65536 || r.MaxSession != 5*time.Minute || r.PingInterval != 0 || r.PingTimeout != 3*time.Second {
		t.Errorf("realtime = %+v", r)
	}
	m := mustParse(t, string(skeleton("", "", "    operations: [chat, realtime]\n")), env()).Model("m")
	if len(m.Operations) != 2 || m.Operations[1] != OpRealtime {
		t.Errorf("operations = %v", m.Operations)
	}
}

// Realtime mistakes are located like any other.
func TestRealtimeErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml cfgString
		line int
		sub  string
	}{
		// why: a hold below one small event cannot replay anything.
		{"hold too small", skeleton("", "", "realtime: {hold_bytes: 10}\n"), 7, `hold_bytes in realtime must be at least 1024`},
		// why: an event limit below one small event would close every session.
		{"event limit too small", skeleton("", "", "realtime: {max_event_bytes: 100}\n"), 7, `max_event_bytes in realtime must be at least 1024`},
		// why: a session bounded by 0 would end at once.
		{"zero max session", skeleton("", "", "realtime: {max_session: 0s}\n"), 7, `max_session in realtime must be greater than 0`},
		// why: a pong that may take no time never comes in time.
		{"zero ping timeout", skeleton("", "", "realtime: {ping_timeout: 0s}\n"), 7, `ping_timeout in realtime must be greater than 0`},
		{"negative ping interval", skeleton("", "", "realtime: {ping_interval: -1s}\n"), 7, `ping_interval in realtime must not be negative`},
		{"unknown key", skeleton("", "", "realtime: {hold: 1}\n"), 7, `unknown key "hold" in realtime`},
		// why: Anthropic's API has no realtime sessions; the model cannot be served.
		{"anthropic channel", cfgString("auth: {mode: none}\nchannels:\n  - {id: a, provider: anthropic, api_key_env: K, base_url: \"http://127.0.0.1:1\"}\n" +
			"models:\n  - name: m\n    max_tokens_default: 10\n    operations: [chat, realtime]\n    chain: [{channel: a}]\n"),
			7, `serves "realtime", but channel "a" of its chain (provider anthropic) serves chat and responses only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantOneError(t, string(tt.yaml), env("K", "k"), tt.line, tt.sub) })
	}
}
