package classify

import (
	"strconv"
	"testing"
)

// TestHopErrorKinds: every kind has its own label (the failover path's
// word and error.type), and the walk's three questions — its class, a
// timeout that forbids a same-channel retry, the chain deadline — have one
// answer per kind (DESIGN.md §2 L2, §3).
func TestHopErrorKinds(t *testing.T) {
	timeouts := map[Kind]bool{KindHeaderTimeout: true, KindGateTimeout: true, KindIdleTimeout: true, KindStalled: true, KindNetTimeout: true}
	seen := map[string]Kind{}
	for k := Kind(0); k < kindCount; k++ {
		e := &HopError{Kind: k, Status: 503}
		label := k.String()
		if label == "" {
			t.Fatalf("kind %d has no label", k)
		}
		if other, dup := seen[label]; dup {
			t.Fatalf("kinds %d and %d share the label %q", other, k, label)
		}
		seen[label] = k
		if got := e.Timeout(); got != timeouts[k] {
			t.Errorf("%s: Timeout() = %v, want %v", label, got, timeouts[k])
		}
		if got := e.ChainDeadline(); got != (k == KindDeadline) {
			t.Errorf("%s: ChainDeadline() = %v", label, got)
		}
		want := Retryable
		switch k {
		case KindCanceled:
			want = Canceled
		case KindUnsupported:
			want = Final
		}
		if k != KindStatus && e.Class() != want {
			t.Errorf("%s: Class() = %v, want %v", label, e.Class(), want)
		}
		aboutChannel := want == Retryable && k != KindDeadline && k != KindBudget && k != KindShutdown
		if k != KindStatus && e.AboutChannel() != aboutChannel {
			t.Errorf("%s: AboutChannel() = %v, want %v", label, e.AboutChannel(), aboutChannel)
		}
	}
	if got := Kind(kindCount).String(); got != "kind("+strconv.Itoa(int(kindCount))+")" {
		t.Errorf("an unknown kind reads %q", got)
	}
}

// TestHopErrorStatus: an upstream status is labelled by its number and
// classed by the status table; a final one may name its code.
func TestHopErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		class  Class
	}{{400, Final}, {404, Final}, {402, Retryable}, {429, Retryable}, {503, Retryable}, {529, Retryable}} {
		e := NewStatus(tc.status)
		if e.Label() != strconv.Itoa(tc.status) || e.Class() != tc.class || e.Timeout() || e.ChainDeadline() {
			t.Errorf("%d: label %q class %v timeout %v", tc.status, e.Label(), e.Class(), e.Timeout())
		}
	}
	if e := (&HopError{Kind: KindStatus, Status: 400}); e.Label() != "400" {
		t.Errorf("a status error built without NewStatus reads %q", e.Label())
	}
	e := NewStatus(400)
	e.Code = "context_length_exceeded"
	if !e.ContextLength() {
		t.Error("a 400 context_length_exceeded is not ContextLength")
	}
	if (&HopError{Kind: KindErrorBody, Code: "context_length_exceeded"}).ContextLength() {
		t.Error("only an upstream status can be ContextLength")
	}
}
