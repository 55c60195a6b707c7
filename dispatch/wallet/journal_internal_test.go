package wallet

import (
	"encoding/json"
	"testing"
	"time"
)

// Why: the journal is read back after a crash, which may tear its last
// line: every line that is not a record is skipped and counted, and never
// stops the lines after it from being read.
func TestParseJournal(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	line := func(r journalRecord) string { b, _ := json.Marshal(r); return string(b) + "\n" }
	charge := journalRecord{Op: opCharge, Time: at, RequestID: "r1", Tenant: "acme", AmountMicros: 9}
	data := line(charge) + `{"op":"charge","request_id":"r2"` + "\n" + // torn
		`{"op":"refund","request_id":"r3","tenant":"a"}` + "\n" + // unknown op
		line(journalRecord{Op: opDone, Time: at, RequestID: "r9"}) + `{"op":"do`
	recs, bad := parseJournal([]byte(data))
	if len(recs) != 2 || recs[0] != charge || recs[1].Op != opDone || bad != 3 {
		t.Fatalf("parsed %+v, %d bad", recs, bad)
	}
}

// Why: the fold decides each request by its records in order: done ends
// it, and a doubt written after a charge does not undo the charge.
func TestFoldJournal(t *testing.T) {
	rec := func(op, id string) journalRecord {
		return journalRecord{Op: op, RequestID: id, Tenant: "acme", AmountMicros: 1}
	}
	got := fold([]journalRecord{
		rec(opCharge, "a"), rec(opDone, "a"), // landed
		rec(opDoubt, "b"), rec(opCharge, "b"), // delivered, then unsettled
		rec(opCharge, "c"), rec(opDoubt, "c"), // a late doubt keeps the charge
		rec(opDoubt, "d"), // undecided
	})
	want := []string{"b:charge", "c:charge", "d:doubt"}
	if len(got) != len(want) {
		t.Fatalf("fold = %+v", got)
	}
	for i, r := range got {
		if r.RequestID+":"+r.Op != want[i] {
			t.Fatalf("fold = %+v, want %v", got, want)
		}
	}
}

// The journal parser reads bytes a crash may have damaged: it must never
// panic, and whatever it returns must be applicable.
func FuzzParseJournal(f *testing.F) {
	f.Add([]byte(`{"op":"charge","time":"2026-05-01T12:00:00Z","request_id":"r1","tenant":"acme","amount_micros":9}` + "\n"))
	f.Add([]byte(`{"op":"done","request_id":"r1"}` + "\n" + `{"op":"doubt","request_id":"r2","tenant":"a"`))
	f.Add([]byte("\n\n{}\n[1,2]\nnull\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, bad := parseJournal(data)
		if bad < 0 {
			t.Fatal("negative bad count")
		}
		for _, r := range recs {
			if !r.valid() {
				t.Fatalf("invalid record returned: %+v", r)
			}
		}
		for _, r := range fold(recs) {
			if r.Op == opDone {
				t.Fatalf("fold returned a done record: %+v", r)
			}
		}
	})
}
