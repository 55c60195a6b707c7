package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/internal/store"
)

// runCorrection runs the two audited corrections of docs/tenants.md:
// `adjust NAME AMOUNT` (either sign: an unsettled charge applied by hand,
// a refund) and `resolve REQUEST_ID charge|release` (an in-doubt charge
// decided). Both need a reason, recorded in the audit trail with the actor.
func runCorrection(ctx context.Context, st *store.Store, pos []string, reason string, out *json.Encoder) error {
	if pos[0] == "adjust" {
		micros, err := admin.SignedAmount(pos[2])
		if err != nil {
			return fmt.Errorf("AMOUNT %q: %w", pos[2], err)
		}
		balance, err := st.Adjust(ctx, pos[1], micros, cliActor, reason)
		if err != nil {
			return err
		}
		return out.Encode(admin.AdjustView{Tenant: pos[1], AmountMicros: micros, BalanceMicros: balance, Reason: reason})
	}
	how := store.Resolution(pos[2])
	if how != store.ResolveCharge && how != store.ResolveRelease {
		return fmt.Errorf("resolve %s: the answer is charge (it was delivered) or release (it was not), not %q", pos[1], pos[2])
	}
	d, entry, err := st.ResolveInDoubt(ctx, pos[1], how, cliActor, reason)
	if err != nil {
		return err
	}
	return out.Encode(admin.ResolutionView{RequestID: d.RequestID, Tenant: d.Tenant, Resolved: how, Charge: entry})
}

// negativeAmount reports an argument like -5 or -0.25: a negative amount,
// never a flag (no flag of hopgate tenants starts with a digit).
func negativeAmount(arg string) bool {
	return len(arg) > 1 && arg[0] == '-' && arg[1] >= '0' && arg[1] <= '9'
}
