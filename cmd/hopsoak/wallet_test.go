package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/store"
)

// Why: the delivery rule leaves exactly one way for an answer to go
// uncharged — an in-doubt row (a delivering hold that expired) — so the
// wallet soak's books accept a complete answer without a charge only as
// one, and an in-doubt row only for a request a client got an answer to
// and that was not charged as well.
func TestBookCheckKnowsInDoubtRows(t *testing.T) {
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	ok := func(id string) result { return result{id: id, status: http.StatusOK, outcome: "ok", path: "c1:ok"} }
	charge := func(id string) store.LedgerEntry {
		return store.LedgerEntry{Kind: store.KindCharge, RequestID: id + "-00f067aa0ba902b7", AmountMicros: -10}
	}
	doubt := func(id string) store.InDoubt {
		return store.InDoubt{Kind: store.KindInDoubt, RequestID: id + "-00f067aa0ba902b7", AmountMicros: 10}
	}
	for _, tc := range []struct {
		name      string
		results   []result
		led       []store.LedgerEntry
		doubts    []store.InDoubt
		violation string // "" none
	}{
		// The ordinary books: every complete answer charged once.
		{"charged", []result{ok(a), ok(b)}, []store.LedgerEntry{charge(a), charge(b)}, nil, ""},
		// A kill between the delivering mark and the charge: in doubt.
		{"uncharged but in doubt", []result{ok(a), ok(b)}, []store.LedgerEntry{charge(a)}, []store.InDoubt{doubt(b)}, ""},
		// Delivered and neither charged nor in doubt: a lost charge.
		{"uncharged", []result{ok(a), ok(b)}, []store.LedgerEntry{charge(a)}, nil, "neither charged nor in doubt"},
		// Resolved twice over: charged and still in doubt.
		{"charged and in doubt", []result{ok(a)}, []store.LedgerEntry{charge(a)}, []store.InDoubt{doubt(a)}, "both charged and in doubt"},
		// A doubt nobody's client asked for.
		{"in doubt, never sent", []result{ok(a)}, []store.LedgerEntry{charge(a)}, []store.InDoubt{doubt(b)}, "which no client sent"},
		// Marked delivering only once an answer was written: never for an error.
		{"in doubt, client got an error", []result{ok(a), {id: b, status: 502, outcome: "exhausted"}},
			[]store.LedgerEntry{charge(a)}, []store.InDoubt{doubt(b)}, "but its client got 502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Wallet: &WalletReport{}}
			bookCheck(rep, tc.results, tc.led, tc.doubts)
			got := strings.Join(rep.Violations, "\n")
			if tc.violation == "" && got != "" || tc.violation != "" && !strings.Contains(got, tc.violation) {
				t.Fatalf("violations %q, want %q", got, tc.violation)
			}
			if rep.Wallet.InDoubt != len(tc.doubts) {
				t.Fatalf("in doubt %d, want %d", rep.Wallet.InDoubt, len(tc.doubts))
			}
		})
	}
}
