package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/telemetry"
)

// rateLimitRetryAfter is the Retry-After of a refusal by on_store_error:
// deny (the counter store is down): a failover or restart takes seconds.
const rateLimitRetryAfter = 5 * time.Second

// SetLimiter sets the tenant limiter (DESIGN §16). Package gateway calls
// it at start; New starts with an in-process one on the real clock.
func (s *Server) SetLimiter(l *ratelimit.Limiter) { s.limiter.Store(l) }

// limit admits the request within its tenant's limits, before the
// wallet's hold: a tenant over its rate costs no store call. It returns
// the ticket to settle (nil: no limit applies) and ok=false once the 429
// (or, with on_store_error: deny, the 503) was written.
//
//go:noinline
func (s *Server) limit(w http.ResponseWriter, r *http.Request, req *dispatch.Request) (*ratelimit.Ticket, bool) {
	if s.limiter.Load() == nil || req.Tenant == "" {
		return nil, true
	}
	est := wallet.Reserved(req.Model, reservationSizing(req))
	return s.limitTokens(w, r, req, est.Input+est.Output)
}

// limitTokens is limit with the tokens to reserve given: a realtime
// session reserves none and is charged its responses' usage as they end
// (Ticket.Charge).
func (s *Server) limitTokens(w http.ResponseWriter, r *http.Request, req *dispatch.Request, tokens int64) (*ratelimit.Ticket, bool) {
	l := s.limiter.Load()
	if l == nil || req.Tenant == "" {
		return nil, true
	}
	a := l.Admit(r.Context(), req.Config, req.Tenant, req.Model.Name, tokens)
	if !a.Refused {
		return a.Ticket, true
	}
	ctx := r.Context()
	if a.StoreError != nil {
		s.tel.Spans.RateLimited(ctx, &telemetry.RateLimit{StoreError: a.StoreError})
		s.refuseLimit(w, r, req, apierror.EngineOverloaded(
			"the rate-limit store is unavailable and rate_limits.on_store_error is deny: nothing was sent upstream; retry shortly",
			rateLimitRetryAfter))
		return nil, false
	}
	kind := a.Cell.Kind.String()
	scope := req.Tenant
	if a.Cell.Model != "" {
		scope += "/" + a.Cell.Model
	}
	s.tel.Spans.RateLimited(ctx, &telemetry.RateLimit{Kind: kind, Scope: scope, Limit: a.Cell.Limit, RetryAfter: a.State.RetryAfter})
	s.tel.Metrics.RateLimited(ctx, req.Model.Name, kind)
	msg := "rate limit reached for tenant " + req.Tenant
	if a.Cell.Model != "" {
		msg += " on model " + a.Cell.Model
	}
	msg += ": limit " + strconv.FormatInt(a.Cell.Limit, 10) + " " + kind + " per minute, used " +
		strconv.FormatInt(a.State.Limit-a.State.Remaining, 10) + ", requested " + strconv.FormatInt(a.Cell.N, 10)
	if a.State.TooLarge {
		msg += "; this request alone is larger than the limit (its tokens are estimated from the body and max_tokens): lower max_tokens"
		// No wait makes it fit: the OpenAI and Anthropic SDKs read this
		// and do not retry (they retry a 429 otherwise, honouring
		// Retry-After up to a minute each time).
		w.Header().Set("X-Should-Retry", "false")
	} else {
		msg += "; retry after " + retryText(a.State.RetryAfter)
	}
	rateLimitHeaders(w.Header(), &a)
	s.refuseLimit(w, r, req, apierror.RateLimitExceeded(kind, msg, max(a.State.RetryAfter, time.Millisecond)))
	return nil, false
}

// refuseLimit writes a limit's refusal and counts it in
// hopgate_requests_total: a rate-limited request is a request the
// dashboards must see.
func (s *Server) refuseLimit(w http.ResponseWriter, r *http.Request, req *dispatch.Request, e *apierror.Error) {
	s.refuseAs(w, r, req, e, telemetry.OutcomeRateLimited)
	s.tel.Metrics.Request(r.Context(), req.Model.Name, req.Operation, telemetry.OutcomeRateLimited)
}

// rateLimitHeaders sets OpenAI's x-ratelimit-{limit,remaining,reset}-
// {requests,tokens} from the tightest window of each kind; reset is a
// duration like OpenAI's (6m0s, 1s, 20ms).
func rateLimitHeaders(h http.Header, a *ratelimit.Admission) {
	for k := range a.Has {
		if !a.Has[k] {
			continue
		}
		st, name := a.Windows[k], ratelimit.Kind(k).String()
		h.Set("X-Ratelimit-Limit-"+name, strconv.FormatInt(st.Limit, 10))
		h.Set("X-Ratelimit-Remaining-"+name, strconv.FormatInt(st.Remaining, 10))
		h.Set("X-Ratelimit-Reset-"+name, retryText(st.Reset))
	}
}

// retryText writes a wait the way OpenAI's reset headers do: 6m0s, 1.5s,
// 20ms (rounded up to the millisecond).
func retryText(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// settleLimit settles the request's tokens with what it was charged (the
// wallet's rules): the reported usage, or, without it, the input
// estimated from the body's bodyBytes (taken before the walk, which lets
// go of the body) and the output from what a cut stream delivered; an
// unanswered request used none.
//
//go:noinline
func (s *Server) settleLimit(r *http.Request, t *ratelimit.Ticket, bodyBytes int, res dispatch.Result) {
	if t == nil {
		return
	}
	var used int64
	if res.Answered {
		c := wallet.Charged(wallet.Outcome{
			Answered: true, InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens,
			UsagePresent: res.Usage.Present, TextBytes: res.Delivered.TextBytes, ToolCallFrames: res.Delivered.ToolCallFrames,
		}, bodyBytes)
		used = c.Input + c.Output
	}
	t.Settle(r.Context(), used)
}
