package upstream

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	tests := []struct {
		name  string
		model string
		want  Fault
	}{
		// A plain name is a healthy model with the default answer length.
		{"healthy", "gpt-4o-mini", Fault{Model: "gpt-4o-mini", Tokens: 8}},
		// Colons in base names (fine-tuned models) must not be read as options.
		{"colon in base", "ft:gpt-4o:org:1|503", Fault{Model: "ft:gpt-4o:org:1", Kind: KindStatus, Status: 503, Tokens: 8}},
		// Retry-After is what L1 honours even below the failure threshold.
		{"retry after", "m|429:ra=7", Fault{Model: "m", Kind: KindStatus, Status: 429, RetryAfter: 7 * time.Second, HasRetryAfter: true, Tokens: 8}},
		// The brief's spellings of once/times.
		{"once suffix", "m|503-once", Fault{Model: "m", Kind: KindStatus, Status: 503, Times: 1, Tokens: 8}},
		{"times suffix", "m|503-times=2", Fault{Model: "m", Kind: KindStatus, Status: 503, Times: 2, Tokens: 8}},
		{"bare once", "m|reset|once", Fault{Model: "m", Kind: KindReset, Times: 1, Tokens: 8}},
		// cut without tokens gets a longer answer so the cut happens.
		{"cut default tokens", "m|cut=40", Fault{Model: "m", Kind: KindCut, Cut: 40, Tokens: 80}},
		{"cut with tokens", "m|tokens=60|cut=40", Fault{Model: "m", Kind: KindCut, Cut: 40, Tokens: 60, tokensSet: true}},
		// Tool calls are an option so they combine with a cut (no resume after tool deltas).
		{"tool calls cut", "m|tool-calls|cut=2", Fault{Model: "m", Kind: KindCut, Cut: 2, Tokens: 4, ToolCalls: true}},
		{"flap once", "m|flap=30s", Fault{Model: "m", Kind: KindFlap, Duration: 30 * time.Second, Tokens: 8}},
		{"flap period", "m|flap=30s/1m", Fault{Model: "m", Kind: KindFlap, Duration: 30 * time.Second, Period: time.Minute, Tokens: 8}},
		{"slow first token", "m|slow-first-token=5s", Fault{Model: "m", Kind: KindSlowFirstToken, Duration: 5 * time.Second, Tokens: 8}},
		{"stall with delay", "m|stall=10s|frame-delay=20ms", Fault{Model: "m", Kind: KindStall, Duration: 10 * time.Second, FrameDelay: 20 * time.Millisecond, Tokens: 8}},
		{"context length", "m|context-length", Fault{Model: "m", Kind: KindContextLength, Tokens: 8}},
		// A queueing provider: late headers, combined with any fault.
		{"header delay", "m|503|header-delay=2s", Fault{Model: "m", Kind: KindStatus, Status: 503, HeaderDelay: 2 * time.Second, Tokens: 8}},
		{"endless", "m|endless-frame", Fault{Model: "m", Kind: KindEndlessFrame, Tokens: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseFault(tt.model)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("ParseFault(%q)\n got %+v\nwant %+v", tt.model, got, tt.want)
			}
			if again, err := ParseFault(got.String()); err != nil || again != got {
				t.Fatalf("round trip %q -> %q: %+v, %v", tt.model, got.String(), again, err)
			}
		})
	}
}

// Typos must fail loudly: a misspelt fault passing as healthy would make a
// failover test pass for the wrong reason.
func TestParseFaultRejects(t *testing.T) {
	for _, model := range []string{
		"", "|503", "m|", "m||503", "m|bogus", "m|5033", "m|503:retry=1", "m|503:ra=x",
		"m|200", "m|399", "m|600", "m|503|429", "m|reset|cut=3", "m|once", "m|times=0",
		"m|tokens=0", "m|tokens=-1", "m|tokens=+3", "m|tokens=3|tokens=4", "m|tokens=40|cut=40",
		"m|cut", "m|cut=-1", "m|stall", "m|stall=0s", "m|stall=10", "m|flap=30s/30s",
		"m|flap=1m/30s", "m|reset=1", "m|tool-calls=1", "m|503-once|once", "m|slow-first-token=48h",
		"m|header-delay", "m|header-delay=0s", "m|header-delay=1s|header-delay=2s",
	} {
		if f, err := ParseFault(model); !errors.Is(err, ErrFault) {
			t.Errorf("ParseFault(%q) = %+v, %v; want ErrFault", model, f, err)
		}
	}
}

// Every kind must be documented in -help, or nobody can use it.
func TestGrammarDocumentsEveryKind(t *testing.T) {
	for k, name := range kindNames {
		if k == KindNone || k == KindStatus {
			continue
		}
		if !strings.Contains(Grammar, name) {
			t.Errorf("Grammar does not mention %q", name)
		}
	}
}

// Model names come from untrusted request bodies: the parser must never
// panic, and anything it accepts must survive a canonical round trip.
func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"m", "m|503", "m|429:ra=7", "m|503-once", "m|tokens=60|cut=40",
		"m|flap=30s/60s", "m|stall=10s-times=2", "m|tool-calls|frame-delay=5ms", "m|bogus", "m||"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, model string) {
		got, err := ParseFault(model)
		if err != nil {
			if !errors.Is(err, ErrFault) {
				t.Fatalf("error without ErrFault: %v", err)
			}
			return
		}
		if got.Tokens < 1 || got.Tokens > maxTokens || (got.Kind == KindCut && got.Tokens <= got.Cut) {
			t.Fatalf("invalid accepted fault %+v", got)
		}
		again, err := ParseFault(got.String())
		if err != nil || again != got {
			t.Fatalf("round trip %q -> %q: %+v, %v", model, got.String(), again, err)
		}
	})
}
