package config

import (
	"testing"
)

// The overload block's defaults are what docs/config.md promises: budget
// derived from GOMEMLIMIT at a quarter, bounds derived, 16 MiB per buffered
// answer and 64 MiB for embeddings and images (their answers legitimately
// reach tens of MiB).
func TestOverloadDefaults(t *testing.T) {
	o := mustParse(t, string(skeleton("", "", "")), env()).Overload
	if o.BudgetBytes != 0 || o.BudgetFraction != 0.25 || o.MaxInFlight != 0 || o.MaxStreams != 0 {
		t.Errorf("overload defaults = %+v", o)
	}
	for _, op := range operations {
		want := int64(16 << 20)
		if op == OpEmbeddings || op == OpImages {
			want = 64 << 20
		}
		if got := o.MaxResponse(op); got != want {
			t.Errorf("MaxResponse(%s) = %d, want %d", op, got, want)
		}
	}
}

// Every key reaches the resolved Overload; max_response_bytes.default
// moves every operation's bound but never lowers the large ones below
// their own default, and a per-operation key beats both.
func TestOverloadKeys(t *testing.T) {
	y := skeleton("", "", "overload:\n  budget_bytes: 1048576\n  budget_fraction: 0.25\n  max_in_flight: 10\n  max_streams: 5\n"+
		"  max_response_bytes: {default: 33554432, chat: 2048, images: 1024}\n")
	o := mustParse(t, string(y), env()).Overload
	if o.BudgetBytes != 1<<20 || o.BudgetFraction != 0.25 || o.MaxInFlight != 10 || o.MaxStreams != 5 {
		t.Errorf("overload = %+v", o)
	}
	want := map[string]int64{OpChat: 2048, OpImages: 1024, OpEmbeddings: 64 << 20, OpCompletions: 32 << 20,
		OpResponses: 32 << 20, OpAudioSpeech: 32 << 20, OpAudioTranscriptions: 32 << 20}
	for op, w := range want {
		if got := o.MaxResponse(op); got != w {
			t.Errorf("MaxResponse(%s) = %d, want %d", op, got, w)
		}
	}
}

// Overload mistakes are located like any other.
func TestOverloadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml cfgString
		sub  string
	}{
		{"fraction zero", skeleton("", "", "overload: {budget_fraction: 0}\n"), `budget_fraction in overload must be in (0, 1], not 0`},
		{"fraction above one", skeleton("", "", "overload: {budget_fraction: 1.5}\n"), `budget_fraction in overload must be in (0, 1], not 1.5`},
		{"negative budget", skeleton("", "", "overload: {budget_bytes: -1}\n"), `budget_bytes in overload`},
		{"unknown operation", skeleton("", "", "overload: {max_response_bytes: {video: 1024}}\n"), `unknown key "video" in max_response_bytes in overload`},
		{"bound below 1 KiB", skeleton("", "", "overload: {max_response_bytes: {chat: 10}}\n"), `chat in max_response_bytes in overload`},
		{"unknown key", skeleton("", "", "overload: {max_stream: 3}\n"), `unknown key "max_stream" in overload`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantOneError(t, string(tt.yaml), env(), 7, tt.sub) })
	}
}
