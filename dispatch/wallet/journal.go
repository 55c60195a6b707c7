package wallet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hopgate/hopgate/internal/store"
)

// JournalFile is the journal's file name inside billing.journal_dir.
const JournalFile = "unsettled.jsonl"

// Journal operations, one JSON line each.
const (
	// opCharge: a charge is final (the answer was delivered) and the store
	// has not taken it yet. Replayed with Settle.
	opCharge = "charge"
	// opDoubt: the request's answer was about to be delivered when the
	// store could not record that on its hold. Replayed with
	// RecordInDoubt, unless a later line of the same request decides it.
	opDoubt = "doubt"
	// opDone: the store has taken what the request's earlier lines said
	// (or it needs nothing any more).
	opDone = "done"
)

// journalRecord is one line of the journal.
type journalRecord struct {
	Op   string    `json:"op"`
	Time time.Time `json:"time"`
	// The charge (opCharge, opDoubt); for opDone only RequestID.
	RequestID    string `json:"request_id"`
	Tenant       string `json:"tenant,omitempty"`
	Model        string `json:"model,omitempty"`
	AmountMicros int64  `json:"amount_micros,omitempty"`
	InputTokens  int64  `json:"input_tokens,omitempty"`
	OutputTokens int64  `json:"output_tokens,omitempty"`
	Estimated    bool   `json:"estimated,omitempty"`
}

func (r *journalRecord) charge() store.Charge {
	return store.Charge{RequestID: r.RequestID, Tenant: r.Tenant, Model: r.Model, AmountMicros: r.AmountMicros,
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, Estimated: r.Estimated}
}

func recordOf(op string, c *store.Charge, at time.Time) journalRecord {
	return journalRecord{Op: op, Time: at.UTC(), RequestID: c.RequestID, Tenant: c.Tenant, Model: c.Model,
		AmountMicros: c.AmountMicros, InputTokens: c.InputTokens, OutputTokens: c.OutputTokens, Estimated: c.Estimated}
}

// Journal is the durable local record of the charges this replica owes the
// store (docs/tenants.md, "The journal"): append-only, one JSON line per
// record, each fsynced before the append returns, so a charge the store
// did not take survives a SIGKILL, a power loss or a shutdown with the
// store down. It is read back at the next start (parseJournal, fold) and
// applied by request id, idempotently (Settle and RecordInDoubt are); once
// nothing in it is open any more it is truncated.
type Journal struct {
	path string
	mu   sync.Mutex
	f    *os.File
	// open is the number of requests whose last record is not opDone.
	open map[string]struct{}
	// replay is what the last process left open, oldest first, for
	// Wallet.Start to apply; bad counts the lines that could not be read.
	replay []journalRecord
	bad    int
}

// OpenJournal opens (creating it) the journal in dir and locks it for this
// process: two replicas must not share one, as each replays only its own.
// What the last process left open is applied by Wallet.Start. A line that
// cannot be read (torn by a crash while it was written) is skipped and
// reported by Start.
func OpenJournal(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("billing.journal_dir: %w", err)
	}
	path := filepath.Join(dir, JournalFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("billing.journal_dir: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s is in use by another process (give each replica its own billing.journal_dir): %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	recs, bad := parseJournal(data)
	j := &Journal{path: path, f: f, open: map[string]struct{}{}, replay: fold(recs), bad: bad}
	for _, r := range j.replay {
		j.open[r.RequestID] = struct{}{}
	}
	if len(j.replay) == 0 {
		j.compact()
	}
	return j, nil
}

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Close closes the file (and releases its lock). The gateway closes it
// after the store, when no handler can append any more.
func (j *Journal) Close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
}

// parseJournal reads the journal's lines. A line that is not a record
// (torn by a crash mid-write, or damaged) is skipped and counted; it
// never stops the lines after it from being read.
func parseJournal(data []byte) ([]journalRecord, int) {
	var recs []journalRecord
	bad := 0
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var r journalRecord
		if err := json.Unmarshal(line, &r); err != nil || !r.valid() {
			bad++
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}

// valid reports a record that can be applied: a known op, a request id,
// and for a charge or a doubt a tenant and an amount in range.
func (r *journalRecord) valid() bool {
	switch r.Op {
	case opDone:
		return r.RequestID != ""
	case opCharge, opDoubt:
		return r.RequestID != "" && r.Tenant != "" && r.AmountMicros >= 0 && r.InputTokens >= 0 && r.OutputTokens >= 0
	}
	return false
}

// fold returns, per request, the record that decides it, oldest first: a
// charge wins over a doubt (the request was delivered), done ends both.
func fold(recs []journalRecord) []journalRecord {
	last := map[string]int{}
	var order []string
	for i, r := range recs {
		prev, seen := last[r.RequestID]
		if !seen {
			order = append(order, r.RequestID)
		}
		switch {
		case r.Op == opDoubt && seen && recs[prev].Op == opCharge:
			// A doubt never undoes a charge written before it.
		default:
			last[r.RequestID] = i
		}
	}
	var out []journalRecord
	for _, id := range order {
		if r := recs[last[id]]; r.Op != opDone {
			out = append(out, r)
		}
	}
	return out
}

// append writes r and fsyncs it. The error is returned (and the caller
// logs the charge as it did before there was a journal).
func (j *Journal) append(r journalRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("journal closed")
	}
	if _, err = j.f.Write(b); err == nil {
		err = j.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	if r.Op == opDone {
		delete(j.open, r.RequestID)
		if len(j.open) == 0 {
			j.compact()
		}
	} else {
		j.open[r.RequestID] = struct{}{}
	}
	return nil
}

// has reports whether requestID has an open record.
func (j *Journal) has(requestID string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.open[requestID]
	return ok
}

// compact empties the file once nothing in it is open (j.mu held): the
// journal stays as small as what is owed.
func (j *Journal) compact() {
	if err := j.f.Truncate(0); err == nil {
		_ = j.f.Sync()
	}
}

// Open is the number of requests the journal still holds open.
func (j *Journal) Open() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.open)
}
