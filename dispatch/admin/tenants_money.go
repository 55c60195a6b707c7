package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
)

// The operator's corrections of money (docs/tenants.md): adjustments
// either way, and decisions on in-doubt charges. Each needs an admin key
// and a reason, and writes an audit row naming both.

// ResolutionView is what resolving an in-doubt charge answers (and `hopgate
// tenants resolve` prints).
type ResolutionView struct {
	RequestID string             `json:"request_id"`
	Tenant    string             `json:"tenant"`
	Resolved  store.Resolution   `json:"resolved"`
	Charge    *store.LedgerEntry `json:"charge,omitempty"` // the ledger row, when charged
}

// AdjustView is what an adjustment answers (and `hopgate tenants adjust`
// prints).
type AdjustView struct {
	Tenant        string `json:"tenant"`
	AmountMicros  int64  `json:"amount_micros"`
	BalanceMicros int64  `json:"balance_micros"`
	Reason        string `json:"reason"`
}

// SignedAmount reads an amount in currency units that may be negative
// ("-0.000336"), exactly; 0 is refused (it would change nothing).
func SignedAmount(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	micros, err := money.Parse(strings.TrimPrefix(s, "-"))
	if err != nil {
		return 0, err
	}
	if micros == 0 {
		return 0, errZeroAmount
	}
	if neg {
		micros = -micros
	}
	return micros, nil
}

var errZeroAmount = errors.New("must not be 0")

func tenantInDoubt(w http.ResponseWriter, r *http.Request, t *Tenants) {
	name := r.PathValue("name")
	if _, err := t.Store.Tenant(r.Context(), name); err != nil {
		storeError(w, err)
		return
	}
	d, err := t.Store.InDoubtCharges(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	if d == nil {
		d = []store.InDoubt{}
	}
	writeJSON(w, d)
}

func adjust(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	var body struct {
		// Amount in currency units, either sign, a JSON string or number.
		Amount json.Number `json:"amount"`
		Reason string      `json:"reason"`
	}
	if !readBody(w, r, &body) {
		return
	}
	micros, err := SignedAmount(strings.Trim(string(body.Amount), `"`))
	if err != nil {
		jsonError(w, http.StatusBadRequest, "amount must be a non-zero amount in currency units, like -0.25 or \"5\": "+err.Error())
		return
	}
	if body.Reason == "" {
		jsonError(w, http.StatusBadRequest, "reason is required: it is recorded in the audit trail")
		return
	}
	name := r.PathValue("name")
	balance, err := t.Store.Adjust(r.Context(), name, micros, actor, body.Reason)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, AdjustView{Tenant: name, AmountMicros: micros, BalanceMicros: balance, Reason: body.Reason})
}

func resolveInDoubt(w http.ResponseWriter, r *http.Request, t *Tenants, actor string) {
	var body struct {
		Resolve store.Resolution `json:"resolve"` // "charge" | "release"
		Reason  string           `json:"reason"`
	}
	if !readBody(w, r, &body) {
		return
	}
	if body.Resolve != store.ResolveCharge && body.Resolve != store.ResolveRelease {
		jsonError(w, http.StatusBadRequest, `resolve must be "charge" (the answer was delivered) or "release" (it was not)`)
		return
	}
	if body.Reason == "" {
		jsonError(w, http.StatusBadRequest, "reason is required: it is recorded in the audit trail")
		return
	}
	name, id := r.PathValue("name"), r.PathValue("request_id")
	doubts, err := t.Store.InDoubtCharges(r.Context(), name)
	if err != nil {
		storeError(w, err)
		return
	}
	found := false
	for _, d := range doubts {
		found = found || d.RequestID == id
	}
	if !found {
		jsonError(w, http.StatusNotFound, "request "+id+" is not in doubt for tenant "+name)
		return
	}
	d, entry, err := t.Store.ResolveInDoubt(r.Context(), id, body.Resolve, actor, body.Reason)
	if err != nil {
		storeError(w, err)
		return
	}
	writeJSON(w, ResolutionView{RequestID: d.RequestID, Tenant: d.Tenant, Resolved: body.Resolve, Charge: entry})
}
