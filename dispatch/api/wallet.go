package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/telemetry"
)

// walletRetryAfter is the Retry-After of a 503 wallet_unavailable: the
// store is usually back within seconds (a failover, a restart).
const walletRetryAfter = 5 * time.Second

// SetWallet turns charging on for configurations with wallets (a store and
// auth.mode keys); nil turns it off. Package gateway calls it at start.
func (s *Server) SetWallet(w *wallet.Wallet) { s.wallet.Store(w) }

// identify authenticates the client: the config's keys first (constant
// time), then the keys issued at run time, from the wallet's in-memory
// snapshot (no database call per request). It returns the tenant, or the
// error to answer with.
func (s *Server) identify(cfg *config.Config, r *http.Request) (tenant string, e *apierror.Error) {
	return s.identifyWith(cfg, r, keySum)
}

// identifyWith is identify with the key read by sum (realtime.go reads a
// browser's subprotocol key too).
func (s *Server) identifyWith(cfg *config.Config, r *http.Request, keySum func(*http.Request) ([32]byte, bool)) (tenant string, e *apierror.Error) {
	if cfg.Auth.Mode == config.AuthNone {
		return "", nil
	}
	if sum, ok := keySum(r); ok {
		if k := configKey(cfg, sum); k != nil {
			if k.Tenant == "" {
				return k.ID, nil // a Config built in code: the key is its tenant
			}
			return k.Tenant, nil
		}
		if w := s.wallet.Load(); w != nil && cfg.Store.Enabled {
			k, found, loaded := w.LookupKey(sum)
			if found {
				return k.Tenant, nil
			}
			if !loaded {
				// Never read the store's keys (it was down since start): the
				// key may well be valid; do not call it invalid.
				return "", apierror.WalletUnavailable("the key store could not be read yet; retry shortly", walletRetryAfter)
			}
		}
	}
	return "", apierror.InvalidAPIKey("missing or invalid API key: send Authorization: Bearer <key> (or x-api-key: <key>)")
}

// reserve holds the request's estimated cost in its tenant's wallet. It
// returns nil when the request is not charged (no wallet, or wallets off),
// and ok=false once a refusal was written: 402 insufficient_balance (the
// wallet cannot cover the reservation; no upstream call) or 503
// wallet_unavailable (the store is down).
//
//go:noinline
func (s *Server) reserve(w http.ResponseWriter, r *http.Request, req *dispatch.Request) (*wallet.Reservation, bool) {
	wl := s.wallet.Load()
	if wl == nil || !req.Config.Wallets() {
		return nil, true
	}
	ctx := r.Context()
	sizing := reservationSizing(req)
	res, err := wl.Reserve(ctx, wallet.Request{
		RequestID: walletRequestID(ctx), Tenant: req.Tenant, Config: req.Config, Model: req.Model, Sizing: sizing,
	})
	if err == nil {
		// The delivery rule: the charge the answer is about to become is
		// recorded before its last write, and made final after it (settle).
		req.Delivering = func(u dispatch.Usage, d dispatch.Delivered) {
			res.Deliver(ctx, outcome(u, d))
		}
		return res, true
	}
	need := wallet.Cost(req.Model, wallet.Reserved(req.Model, sizing))
	s.refuseWallet(w, r, req, err, "this request: it reserves "+money.Format(need)+" "+
		req.Config.Billing.Currency+" at the list price of model "+req.Model.Name+
		" (from max_tokens, or the model's estimate without it); top up the wallet or lower max_tokens", need)
	return nil, false
}

// refuseWallet answers a failed reservation of need micro-units: 402
// insufficient_balance (the wallet cannot cover what, or the tenant has
// none) or 503 wallet_unavailable.
func (s *Server) refuseWallet(w http.ResponseWriter, r *http.Request, req *dispatch.Request, err error, what string, need int64) {
	ctx := r.Context()
	var e *apierror.Error
	switch {
	case errors.Is(err, wallet.ErrInsufficientBalance), errors.Is(err, wallet.ErrNoWallet):
		reason := "insufficient_balance"
		msg := "the wallet of tenant " + req.Tenant + " cannot cover " + what
		if errors.Is(err, wallet.ErrNoWallet) {
			reason = "no_wallet"
			msg = "tenant " + req.Tenant + " has no wallet on this gateway; an operator creates it with `hopgate tenants create`"
		}
		s.tel.Metrics.WalletDenied(ctx, req.Model.Name)
		s.tel.Spans.WalletDenied(ctx, req.Tenant, reason, need)
		e = apierror.InsufficientBalance(msg)
	default:
		e = apierror.WalletUnavailable("the wallet store is unavailable, so this request cannot be charged; nothing was sent upstream", walletRetryAfter)
	}
	s.refuse(w, r, req, e)
}

// reservationSizing is what the request's hold is sized from. Embeddings
// produce no output tokens: their hold is the input alone.
func reservationSizing(req *dispatch.Request) wallet.Sizing {
	s := wallet.Sizing{BodyBytes: len(req.Body), MaxTokens: req.Fields.MaxTokens, MaxTokensPresent: req.Fields.MaxTokensPresent}
	if req.Operation == config.OpEmbeddings {
		s.MaxTokens, s.MaxTokensPresent = 0, true
	}
	return s
}

// refuse writes a wallet refusal with hopgate's headers and its log line.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, req *dispatch.Request, e *apierror.Error) {
	s.refuseAs(w, r, req, e, e.Code)
}

// refuseAs is refuse with the outcome the span and the log line say (a
// limit's refusal is rate_limited, whatever its code).
func (s *Server) refuseAs(w http.ResponseWriter, r *http.Request, req *dispatch.Request, e *apierror.Error, outcome string) {
	w.Header().Set("X-Hopgate-Model", req.Model.Name)
	s.tel.Spans.Refused(r.Context(), &telemetry.Refusal{Outcome: outcome, Code: e.Code, Tenant: req.Tenant})
	reply(w, r, e)
	s.lines.Start(r.Context(), slog.LevelInfo, "request").
		Str("method", r.Method).Str("path", r.URL.Path).Str("model", req.Model.Name).
		Int("status", e.Status).Str("outcome", outcome).Str("code", e.Code).
		Str("tenant", req.Tenant).End()
}

// settle charges (or releases) the request's reservation with what the
// engine reports: the serving hop's usage, or what a cut stream delivered.
//
//go:noinline
func (s *Server) settle(r *http.Request, hold *wallet.Reservation, res dispatch.Result) {
	o := outcome(res.Usage, res.Delivered)
	o.Answered = res.Answered
	hold.Finish(r.Context(), o)
}

// outcome is the wallet's view of an answer's usage and delivery.
func outcome(u dispatch.Usage, d dispatch.Delivered) wallet.Outcome {
	return wallet.Outcome{
		Answered: true, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, UsagePresent: u.Present,
		TextBytes: d.TextBytes, ToolCallFrames: d.ToolCallFrames,
	}
}

// walletRequestID keys a request's hold and ledger row. The trace id alone
// is not unique (a client may send the same traceparent twice, and a
// ledger keyed by it would charge the second request nothing), so the
// server span's id, chosen by hopgate, follows it: the ledger's request_id
// starts with the X-Request-Id the client saw.
func walletRequestID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() && sc.HasSpanID() {
		return sc.TraceID().String() + "-" + sc.SpanID().String()
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
