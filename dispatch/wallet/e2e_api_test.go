package wallet_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/telemetry"
)

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// Why: the acceptance test of issue 19 through the HTTP API, on both
// drivers: a tenant with a small balance is served until the balance runs
// out, then gets 402 insufficient_balance with no upstream call; after a
// top-up it is served again; the ledger adds up exactly to the balance
// change, each charge is the usage the fake reported at the list price,
// and a streamed and a non-streamed answer with the same usage cost the
// same.
func TestServedUntilTheWalletRunsOut(t *testing.T) {
	drivers(t, func(t *testing.T, driver string) {
		e := newE2E(t, driver)
		ctx := context.Background()
		if _, err := e.st.CreateTenant(ctx, "acme", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.TopUp(ctx, "acme", 100, "test"); err != nil { // 0.0001 USD
			t.Fatal(err)
		}
		g := e.start(e.configYAML("m|tokens=8", "ok", ""), t0)
		up := e.ups["a"]

		served, stream := 0, false
		var denied reply
		for i := 0; i < 20; i++ {
			before := len(up.Log())
			r := post(t, g.Addr(), acmeKey, chatBody(stream, 8))
			if r.status == http.StatusPaymentRequired {
				if len(up.Log()) != before {
					t.Fatal("a 402 request reached the upstream")
				}
				denied = r
				break
			}
			if r.status != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, r.status, r.body)
			}
			if stream && (!strings.HasSuffix(r.body, "data: [DONE]\n\n") || strings.Contains(r.body, "completion_tokens")) {
				t.Fatalf("stream (the client asked for no usage):\n%s", r.body)
			}
			served++
			stream = !stream
		}
		t.Logf("%s: served %d requests before the 402", driver, served)
		if served < 3 || denied.status == 0 {
			t.Fatalf("served %d, then %d", served, denied.status)
		}
		if errorCode(denied.body) != "insufficient_balance" || !strings.Contains(denied.body, `"type":"insufficient_quota"`) ||
			denied.header.Get("X-Request-Id") == "" || !strings.Contains(denied.body, `"request_id":"`+denied.header.Get("X-Request-Id")+`"`) {
			t.Fatalf("402 reply: %v %s", denied.header, denied.body)
		}
		// Refused again while nothing changed: the reservation still does not fit.
		if r := post(t, g.Addr(), acmeKey, chatBody(false, 8)); r.status != http.StatusPaymentRequired {
			t.Fatalf("second attempt: %d", r.status)
		}
		if _, err := e.st.TopUp(ctx, "acme", 1_000_000, "test"); err != nil {
			t.Fatal(err)
		}
		if r := post(t, g.Addr(), acmeKey, chatBody(true, 8)); r.status != http.StatusOK {
			t.Fatalf("after the top-up: %d %s", r.status, r.body)
		}
		served++

		tn := e.tenant()
		led, err := e.st.Ledger(ctx, "acme", 0)
		if err != nil {
			t.Fatal(err)
		}
		var charges, topups int64
		nCharges := 0
		for _, row := range led {
			switch row.Kind {
			case store.KindTopUp:
				topups += row.AmountMicros
			case store.KindCharge:
				nCharges++
				charges += -row.AmountMicros
				// The fake reports 2 prompt tokens ("two words") and 8
				// completion tokens, streamed or not.
				if want := listPrice.Cost(2, 8); row.AmountMicros != -want || row.InputTokens != 2 || row.OutputTokens != 8 ||
					row.Estimated || row.Model != "m" || !strings.Contains(row.RequestID, "-") {
					t.Errorf("charge row %+v, want %d for 2+8 tokens", row, want)
				}
			}
		}
		if nCharges != served || topups != 1_000_100 || tn.BalanceMicros != topups-charges || tn.ReservedMicros != 0 {
			t.Fatalf("served %d, %d charges; top-ups %d, charges %d, wallet %+v", served, nCharges, topups, charges, tn)
		}
		if err := e.st.Verify(ctx); err != nil {
			t.Fatal(err)
		}

		m := scrape(t, g)
		if v, ok := metricValue(m, `hopgate_wallet_denied_total{model="m",region=""} `); !ok || v != "2" {
			t.Errorf("denied metric %q", v)
		}
		if v, ok := metricValue(m, `hopgate_wallet_charges_total{model="m",region="",usage="reported"} `); !ok || v != strconv.Itoa(served) {
			t.Errorf("charges metric %q, want %d", v, served)
		}
		if v, _ := metricValue(m, `hopgate_revenue_total{model="m",region=""} `); v != strconv.FormatFloat(money.Float(charges), 'g', -1, 64) {
			t.Errorf("revenue metric %q, want %v", v, money.Float(charges))
		}
		if strings.Contains(m, `tenant="`) {
			t.Error("a tenant is a metric label")
		}
		// The refusal is a span event on the server span, with the tenant
		// as an attribute.
		_ = g.tel.TracerProvider.ForceFlush(ctx)
		events := 0
		for _, s := range g.spans.GetSpans() {
			for _, ev := range s.Events {
				if ev.Name == telemetry.EventWalletDenied {
					events++
					found := false
					for _, a := range s.Attributes {
						found = found || a.Key == telemetry.AttrTenant && a.Value.AsString() == "acme"
					}
					if !found {
						t.Errorf("span %q has no tenant attribute", s.Name)
					}
				}
			}
		}
		if events != 2 {
			t.Errorf("%d denial span events, want 2", events)
		}
	})
}

// Why: a failover (503, then ok on a pricier channel) charges once, at the
// list price; the failed hop is not charged, and what the pricier channel
// cost above the cheapest is in the failover premium metric.
func TestFailoverChargesOnceAtTheListPrice(t *testing.T) {
	drivers(t, func(t *testing.T, driver string) {
		e := newE2E(t, driver)
		ctx := context.Background()
		e.st.CreateTenant(ctx, "acme", "test")
		e.st.TopUp(ctx, "acme", 1_000_000, "test")
		g := e.start(e.configYAML("m|503", "m|tokens=10", ""), t0)
		r := post(t, g.Addr(), acmeKey, chatBody(false, 10))
		if r.status != http.StatusOK || r.header.Get("X-Hopgate-Path") != "a:503 -> b:ok" {
			t.Fatalf("%d %s %s", r.status, r.header.Get("X-Hopgate-Path"), r.body)
		}
		led, _ := e.st.Ledger(ctx, "acme", 0)
		if len(led) != 2 || led[0].Kind != store.KindCharge || led[0].AmountMicros != -listPrice.Cost(2, 10) {
			t.Fatalf("ledger %+v", led)
		}
		m := scrape(t, g)
		// b costs 0.5/0.5 per 1M, a (the cheapest) 0.1/0.2: for 2+10 tokens
		// the premium is 2×0.4 + 10×0.3 = 3.8 per 1M.
		v, ok := metricValue(m, `hopgate_failover_premium_total{channel="b",model="m",region=""} `)
		if f, err := strconv.ParseFloat(v, 64); !ok || err != nil || f < 3.79e-6 || f > 3.81e-6 {
			t.Errorf("premium %q, want 3.8e-06", v)
		}
		if _, ok := metricValue(m, `hopgate_failover_premium_total{channel="a"`); ok {
			t.Error("the failed hop has a premium")
		}
		if v, _ := metricValue(m, `hopgate_cost_total{channel="b",model="m",region=""} `); v != "6e-06" {
			t.Errorf("cost %q, want 6e-06", v)
		}
	})
}

// Why: failed requests and hopgate's own errors are never charged: an
// exhausted chain (503 everywhere), a final upstream 400, an unknown model.
func TestFailuresAreNotCharged(t *testing.T) {
	e := newE2E(t, "sqlite")
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	e.st.TopUp(ctx, "acme", 1_000_000, "test")
	g := e.start(e.configYAML("m|503", "m|content-filter", ""), t0)
	if r := post(t, g.Addr(), acmeKey, chatBody(false, 10)); r.status != http.StatusBadRequest {
		t.Fatalf("content filter: %d %s", r.status, r.body)
	}
	g2 := e.start(e.configYAML("m|503", "m|502", ""), t0)
	if r := post(t, g2.Addr(), acmeKey, chatBody(true, 10)); r.status != http.StatusBadGateway {
		t.Fatalf("exhausted: %d %s", r.status, r.body)
	}
	if r := post(t, g2.Addr(), acmeKey, `{"model":"nope","messages":[]}`); r.status != http.StatusNotFound {
		t.Fatalf("unknown model: %d", r.status)
	}
	if tn := e.tenant(); tn.BalanceMicros != 1_000_000 || tn.ReservedMicros != 0 {
		t.Fatalf("wallet %+v", tn)
	}
}

// Why: a stream cut after commit is charged for what was delivered (the
// documented estimate), and a client that leaves mid-stream likewise;
// nothing stays reserved.
func TestCutStreamChargedForWhatWasDelivered(t *testing.T) {
	e := newE2E(t, "sqlite")
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	e.st.TopUp(ctx, "acme", 1_000_000, "test")
	g := e.start(e.configYAML("m|tokens=10|cut=4", "ok", ""), t0)
	body := chatBody(true, 10)
	r := post(t, g.Addr(), acmeKey, body)
	if r.status != http.StatusOK || !strings.Contains(r.body, "upstream_stream_interrupted") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	led, _ := e.st.Ledger(ctx, "acme", 1)
	// Input ceil(len(body)/4); output ceil(len("tok1 tok2 tok3 tok4 ")/4) = 5.
	in := int64((len(body) + 3) / 4)
	if row := led[0]; !row.Estimated || row.InputTokens != in || row.OutputTokens != 5 || row.AmountMicros != -listPrice.Cost(in, 5) {
		t.Fatalf("charge %+v, want estimated %d+5 tokens", row, in)
	}
	if tn := e.tenant(); tn.ReservedMicros != 0 {
		t.Fatalf("wallet %+v", tn)
	}
}

// Why: with auth.mode none wallets are off: a configured store is never
// touched by a request (no hold, no ledger row).
func TestAuthNoneChargesNothing(t *testing.T) {
	e := newE2E(t, "sqlite")
	yml := strings.Replace(e.configYAML("m", "ok", ""), "auth:\n  keys:\n    - {id: acme-key, tenant: acme, sha256: "+sha(acmeKey)+"}\n", "auth: {mode: none}\n", 1)
	g := e.start(yml, t0)
	if r := post(t, g.Addr(), "", chatBody(false, 5)); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if ts, _ := e.st.Tenants(context.Background()); len(ts) != 0 {
		t.Fatalf("tenants %+v", ts)
	}
	if g.Wallet().Pending() != 0 {
		t.Fatal("pending store operations with wallets off")
	}
}

// Why: a client that leaves is charged for what reached it: nothing when
// it left before anything was committed (the hold is released), the
// estimate of the delivered text when it left mid-stream.
func TestClientGone(t *testing.T) {
	e := newE2E(t, "sqlite")
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	e.st.TopUp(ctx, "acme", 1_000_000, "test")

	// Before commit: the upstream never answers; the client gives up.
	g := e.start(e.configYAML("m|no-headers", "ok", ""), t0)
	cctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+g.Addr()+"/v1/chat/completions", strings.NewReader(chatBody(true, 10)))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := streamClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the upstream call", func() bool { return len(e.ups["a"].Log()) == 1 })
	if e.tenant().ReservedMicros == 0 {
		t.Fatal("no hold while the request is in flight")
	}
	cancel()
	<-done
	waitFor(t, "the release", func() bool { return e.tenant().ReservedMicros == 0 })

	// Mid-stream: two tokens read, then the client leaves.
	g2 := e.start(e.configYAML("m|tokens=100|frame-delay=50ms", "ok", ""), t0)
	body := chatBody(true, 100)
	req, _ = http.NewRequest(http.MethodPost, "http://"+g2.Addr()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	resp, err := streamClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	for !strings.Contains(string(buf), "tok2 ") {
		b := make([]byte, 512)
		n, err := resp.Body.Read(b)
		buf = append(buf, b[:n]...)
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
	}
	resp.Body.Close()
	var row struct {
		out, amount int64
		estimated   bool
	}
	waitFor(t, "the charge", func() bool {
		led, _ := e.st.Ledger(ctx, "acme", 1)
		if led[0].Kind != store.KindCharge {
			return false
		}
		row.out, row.amount, row.estimated = led[0].OutputTokens, -led[0].AmountMicros, led[0].Estimated
		return true
	})
	// At least "tok1 tok2 " (10 bytes: 3 tokens) was delivered, far less
	// than the 100 tokens of the whole answer.
	in := int64((len(body) + 3) / 4)
	if !row.estimated || row.out < 3 || row.out > 50 || row.amount != listPrice.Cost(in, row.out) {
		t.Fatalf("charge %+v", row)
	}
	if tn := e.tenant(); tn.ReservedMicros != 0 {
		t.Fatalf("wallet %+v", tn)
	}
}

// Why: Anthropic clients on POST /v1/messages get the 402 in Anthropic's
// shape (billing_error), authenticate with x-api-key, and are charged the
// usage the (translated) answer reported.
func TestMessagesEndpointCharges(t *testing.T) {
	e := newE2E(t, "sqlite")
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	g := e.start(e.configYAML("m|tokens=8", "ok", ""), t0)
	send := func() reply {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"two words"}]}`))
		req.Header.Set("x-api-key", acmeKey)
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(b)}
	}
	r := send()
	if r.status != http.StatusPaymentRequired || !strings.Contains(r.body, `"type":"error"`) ||
		!strings.Contains(r.body, `"type":"billing_error"`) || !strings.Contains(r.body, "insufficient_balance") {
		t.Fatalf("402: %d %s", r.status, r.body)
	}
	if len(e.ups["a"].Log()) != 0 {
		t.Fatal("the refused request reached the upstream")
	}
	e.st.TopUp(ctx, "acme", 1_000_000, "test")
	if r := send(); r.status != http.StatusOK || !strings.Contains(r.body, "message_stop") {
		t.Fatalf("after the top-up: %d %s", r.status, r.body)
	}
	led, _ := e.st.Ledger(ctx, "acme", 1)
	if row := led[0]; row.Kind != store.KindCharge || row.Estimated || row.OutputTokens != 8 || row.AmountMicros != -listPrice.Cost(row.InputTokens, 8) {
		t.Fatalf("charge %+v", row)
	}
}

// panicTransport panics instead of sending a hop: a bug in the request path.
type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) {
	panic("a bug in the request path")
}

// Why: a panic in the request path after the reservation (net/http
// recovers it and breaks the connection) releases the hold and charges
// nothing: what was delivered is unknown.
func TestPanicReleasesTheHold(t *testing.T) {
	e := newE2E(t, "sqlite")
	ctx := context.Background()
	if _, err := e.st.CreateTenant(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.TopUp(ctx, "acme", 1_000_000, "test"); err != nil {
		t.Fatal(err)
	}
	g := e.startWith(e.configYAML("ok", "ok", ""), t0, func(o *gateway.Options) { o.Transport = panicTransport{} })
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/chat/completions", strings.NewReader(chatBody(false, 10)))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a panicking request answered %d", resp.StatusCode)
	}
	if tn := e.tenant(); tn.BalanceMicros != 1_000_000 || tn.ReservedMicros != 0 {
		t.Fatalf("wallet after the panic %+v, want the hold released and nothing charged", tn)
	}
}
