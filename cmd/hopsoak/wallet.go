package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hopgate/hopgate/internal/store"
)

// Wallet mode (-wallet): every request is sent with a tenant's key, so
// the gateway reserves and charges each one against a prepaid wallet in
// a SQLite store, and the books are checked after the drain (issue 35):
// the ledger and the balance agree, nothing stays reserved, no request
// the client saw fail was charged, and every complete answer was — or is
// an in-doubt row (the delivery rule, docs/tenants.md: a delivering hold
// that expired; the only way an answer may go uncharged).
const (
	walletTenant = "soak"
	walletKey    = "hg-soak-wallet-key"
	// walletTopUp is large enough that no soak runs the wallet dry: a
	// 402 would be a shed the soak does not expect.
	walletTopUp = 1_000_000_000_000 // micro-units: one million
)

// soakWallet is the store a wallet-mode soak charges.
type soakWallet struct {
	dir, path string
}

// newSoakWallet creates the store file, the tenant and its top-up; the
// gateway opens the same file (store: in the config).
func newSoakWallet(ctx context.Context) (*soakWallet, error) {
	dir, err := os.MkdirTemp("", "hopsoak-wallet-")
	if err != nil {
		return nil, err
	}
	w := &soakWallet{dir: dir, path: filepath.Join(dir, "wallets.db")}
	st, err := w.open(ctx)
	if err != nil {
		w.remove()
		return nil, err
	}
	defer st.Close()
	if _, err := st.CreateTenant(ctx, walletTenant, "hopsoak"); err != nil {
		w.remove()
		return nil, fmt.Errorf("wallet: %w", err)
	}
	if _, err := st.TopUp(ctx, walletTenant, walletTopUp, "hopsoak"); err != nil {
		w.remove()
		return nil, fmt.Errorf("wallet: %w", err)
	}
	return w, nil
}

func (w *soakWallet) open(ctx context.Context) (*store.Store, error) {
	return store.Open(ctx, store.Config{Driver: store.DriverSQLite, Path: w.path, BusyTimeout: 30 * time.Second})
}

func (w *soakWallet) remove() { _ = os.RemoveAll(w.dir) }

// configYAML is the config's auth and store sections for the wallet.
func (w *soakWallet) configYAML() string {
	sum := sha256.Sum256([]byte(walletKey))
	return fmt.Sprintf("auth:\n  keys:\n    - {id: soak-key, tenant: %s, sha256: %s}\nstore: {driver: sqlite, path: %q}\n",
		walletTenant, hex.EncodeToString(sum[:]), w.path)
}

// keyTransport sends every request with the tenant's key.
type keyTransport struct{ next http.RoundTripper }

func (t keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+walletKey)
	return t.next.RoundTrip(r)
}

// checkBooks reads the drained store and checks the books against what
// the clients saw.
func (w *soakWallet) checkBooks(ctx context.Context, rep *Report, results []result) {
	st, err := w.open(ctx)
	if err != nil {
		rep.violate("wallet", "open the store after the drain: %v", err)
		return
	}
	defer st.Close()
	if err := st.Verify(ctx); err != nil {
		rep.violate("wallet", "the ledger and the balances disagree: %v", err)
	}
	tn, err := st.Tenant(ctx, walletTenant)
	if err != nil {
		rep.violate("wallet", "tenant: %v", err)
		return
	}
	led, err := st.Ledger(ctx, walletTenant, 0)
	if err != nil {
		rep.violate("wallet", "ledger: %v", err)
		return
	}
	doubts, err := st.InDoubtCharges(ctx, walletTenant)
	if err != nil {
		rep.violate("wallet", "in-doubt charges: %v", err)
		return
	}
	bookCheck(rep, results, led, doubts)
	rep.Wallet.Balance, rep.Wallet.Reserved = tn.BalanceMicros, tn.ReservedMicros
	if tn.ReservedMicros != 0 {
		rep.violate("wallet", "%d micro-units still reserved after the drain", tn.ReservedMicros)
	}
	if topUps, charges := ledgerSums(led); tn.BalanceMicros != topUps+charges {
		rep.violate("wallet", "balance %d, but top-ups %d and charges %d", tn.BalanceMicros, topUps, charges)
	}
}

// ledgerSums is the ledger's top-ups and charges (negative), the rows the
// balance is made of.
func ledgerSums(led []store.LedgerEntry) (topUps, charges int64) {
	for _, row := range led {
		switch row.Kind {
		case store.KindTopUp:
			topUps += row.AmountMicros
		case store.KindCharge:
			charges += row.AmountMicros
		}
	}
	return topUps, charges
}

// bookCheck checks the ledger's charges and the in-doubt rows against
// what the clients saw: no request charged twice, none charged that no
// client sent or whose client got an error, none both charged and in
// doubt, and every complete answer charged or in doubt.
func bookCheck(rep *Report, results []result, led []store.LedgerEntry, doubts []store.InDoubt) {
	byID := make(map[string]result, len(results))
	for _, r := range results {
		if r.id != "" {
			byID[r.id] = r
		}
	}
	charged := map[string]bool{}
	for _, row := range led {
		if row.Kind != store.KindCharge {
			continue
		}
		rep.Wallet.Charges++
		if row.Estimated {
			rep.Wallet.Estimated++
		}
		// A charge is keyed by trace id and the server span's id; the
		// client knows the trace id (X-Request-Id).
		id, _, _ := strings.Cut(row.RequestID, "-")
		if charged[id] {
			rep.violate("wallet", "request %s charged twice", row.RequestID)
		}
		charged[id] = true
		r, ok := byID[id]
		switch {
		case !ok:
			rep.violate("wallet", "charge %d for request %s, which no client sent", row.AmountMicros, row.RequestID)
		case r.status != http.StatusOK:
			rep.violate("wallet", "request %s charged %d, but its client got %d (%s)", r.id, row.AmountMicros, r.status, r.path)
		}
	}
	inDoubt := map[string]bool{}
	for _, d := range doubts {
		rep.Wallet.InDoubt++
		id, _, _ := strings.Cut(d.RequestID, "-")
		r, ok := byID[id]
		switch {
		case charged[id]:
			rep.violate("wallet", "request %s is both charged and in doubt", d.RequestID)
		case !ok:
			rep.violate("wallet", "in-doubt charge %d for request %s, which no client sent", d.AmountMicros, d.RequestID)
		case r.status != http.StatusOK:
			// Marked delivering only once an answer was written.
			rep.violate("wallet", "request %s in doubt, but its client got %d (%s)", r.id, r.status, r.path)
		}
		inDoubt[id] = true
	}
	for _, r := range results {
		complete := r.status == http.StatusOK && !r.left && (r.outcome == "ok" || r.outcome == "failover_ok")
		if !complete || charged[r.id] {
			continue
		}
		rep.Wallet.Uncharged++
		if !inDoubt[r.id] {
			rep.violate("wallet", "request %s delivered a complete answer (%s) and is neither charged nor in doubt", r.id, r.path)
		}
	}
}

// WalletReport is what a wallet-mode soak found in the books.
type WalletReport struct {
	Charges   int   `json:"charges"`
	Estimated int   `json:"estimated_charges"`
	Uncharged int   `json:"complete_answers_uncharged"` // each must be in doubt
	InDoubt   int   `json:"in_doubt"`
	Balance   int64 `json:"balance_micros"`
	Reserved  int64 `json:"reserved_micros"`
}

// text is the report's wallet line.
func (w *WalletReport) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wallet: %d charges (%d estimated for cut streams), %d in doubt, %d complete answers uncharged (each must be in doubt); balance %d, reserved %d micro-units after the drain\n",
		w.Charges, w.Estimated, w.InDoubt, w.Uncharged, w.Balance, w.Reserved)
	return b.String()
}

// CloseIdleConnections closes the client's idle connections (the leak
// check after the drain counts them).
func (t keyTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
