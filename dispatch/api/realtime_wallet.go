package api

import (
	"context"
	"net/http"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/money"
)

// reserveSession holds the model's realtime_hold on the tenant's wallet
// before the upgrade (DESIGN.md §15, Wallets) and wires every response.done
// of the session to a ledger charge (Request.OnResponseDone). It returns
// nil when sessions are not charged (no wallet, or wallets off), and
// ok=false once a refusal was written: 402 insufficient_balance, or 503
// wallet_unavailable, as an HTTP answer (nothing was upgraded or dialed).
// The caller closes the Session when ServeRealtime returns: the hold is
// released whatever ended the session.
func (s *Server) reserveSession(w http.ResponseWriter, r *http.Request, req *dispatch.Request) (*wallet.Session, bool) {
	wl := s.wallet.Load()
	if wl == nil || !req.Config.Wallets() {
		return nil, true
	}
	ctx := r.Context()
	ses, err := wl.ReserveSession(ctx, wallet.Request{
		RequestID: walletRequestID(ctx), Tenant: req.Tenant, Config: req.Config, Model: req.Model,
	})
	if err != nil {
		hold := req.Model.RealtimeHold
		s.refuseWallet(w, r, req, err, "a realtime session of model "+req.Model.Name+": it holds "+money.Format(hold)+" "+
			req.Config.Billing.Currency+" (models[].realtime_hold) until the session closes; top up the wallet", hold)
		return nil, false
	}
	// A charge must land even when the session is ending under it.
	cctx := context.WithoutCancel(ctx)
	req.OnResponseDone = func(d dispatch.ResponseDone) {
		ses.Charge(cctx, d.ResponseID, d.InputTokens, d.OutputTokens)
	}
	return ses, true
}
