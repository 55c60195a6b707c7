package wallet_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/testkit"
)

// realtimeModels are two realtime models on channel a: one whose fake
// sends every response.done twice (a replay), one that drops the session
// after the first client event; each holds 0.001 (1000 micro-units) and
// lists 1 and 2 per 1M tokens, so a response (10 in, 20 out) costs 50.
const realtimeModels = `  - name: voice
    operations: [realtime]
    chain: [{channel: a, upstream_model: "gpt-realtime|rt-repeat-done", price: {input: 0.1, output: 0.2}}]
    price: {input: 1, output: 2}
    realtime_hold: 0.001
  - name: voice-drop
    operations: [realtime]
    chain: [{channel: a, upstream_model: "gpt-realtime|rt-drop=1", price: {input: 0.1, output: 0.2}}]
    price: {input: 1, output: 2}
    realtime_hold: 0.001
`

const responseCost = 10*1 + 20*2

// Why (DESIGN.md §15, Wallets; issue 32): a realtime session is charged
// like a request, on a real SQLite store through a WebSocket session: a
// tenant that cannot cover the model's realtime_hold gets 402
// insufficient_balance before the upgrade (nothing dialed); an open
// session holds realtime_hold; two responses are two ledger charges keyed
// by their response ids, each response.done replayed by the upstream is
// charged once; and the hold is released when the client closes, when
// the upstream drops the session, and when the client vanishes.
func TestRealtimeSessionWallet(t *testing.T) {
	e := newE2E(t, config.StoreSQLite)
	ctx := context.Background()
	if _, err := e.st.CreateTenant(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.TopUp(ctx, "acme", 999, "test"); err != nil { // below the hold
		t.Fatal(err)
	}
	g := e.start(e.configYAML("m", "m", realtimeModels), t0)
	addr := g.Addr()
	dial := func(model string) (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(t.Context(), "ws://"+addr+"/v1/realtime?model="+model, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + acmeKey}},
		})
	}
	tenant := func() (balance, reserved int64) {
		tn, err := e.st.Tenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		return tn.BalanceMicros, tn.ReservedMicros
	}

	// 402 before the upgrade: the balance does not cover the hold.
	_, resp, err := dial("voice")
	if err == nil || resp == nil || resp.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("a session the wallet cannot cover: %v, %+v", err, resp)
	}
	if n := len(e.ups["a"].Log()); n != 0 {
		t.Fatalf("a refused session dialed the upstream (%d)", n)
	}
	if _, err := e.st.TopUp(ctx, "acme", 10_000-999, "test"); err != nil {
		t.Fatal(err)
	}

	c, _, err := dial("voice")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	rctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	read := func(until string) {
		t.Helper()
		for {
			_, b, err := c.Read(rctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", until, err)
			}
			if strings.Contains(string(b), `"type":"`+until+`"`) {
				return
			}
		}
	}
	read("session.created")
	if _, reserved := tenant(); reserved != 1000 {
		t.Fatalf("an open session reserves %d, want its realtime_hold 1000", reserved)
	}
	var ids []string
	for i := 0; i < 2; i++ {
		if err := c.Write(rctx, websocket.MessageText, []byte(`{"type":"response.create"}`)); err != nil {
			t.Fatal(err)
		}
		read("response.done")
		read("response.done") // the replay
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	settled(t, addr)
	balance, reserved := tenant()
	if reserved != 0 || balance != 10_000-2*responseCost {
		t.Fatalf("after the session: balance %d, reserved %d; want %d, 0", balance, reserved, 10_000-2*responseCost)
	}
	ledger, err := e.st.Ledger(ctx, "acme", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range ledger {
		if row.Kind != "charge" {
			continue
		}
		if row.AmountMicros != -responseCost || row.Model != "voice" || row.InputTokens != 10 || row.OutputTokens != 20 {
			t.Errorf("charge %+v", row)
		}
		ids = append(ids, row.RequestID)
	}
	if len(ids) != 2 || ids[0] == ids[1] || !strings.Contains(ids[0], "/resp_a_") || !strings.Contains(ids[1], "/resp_a_") {
		t.Fatalf("charges keyed %v, want two, one per response id", ids)
	}
	session, _, _ := strings.Cut(ids[0], "/")
	if ids[1] != wallet.ResponseKey(session, strings.TrimPrefix(ids[1], session+"/")) {
		t.Fatalf("the charges of one session carry different session ids: %v", ids)
	}

	// The upstream drops the session after one event: the hold goes too.
	d, _, err := dial("voice-drop")
	if err != nil {
		t.Fatal(err)
	}
	defer d.CloseNow()
	if _, b, err := d.Read(rctx); err != nil || !strings.Contains(string(b), "session.created") {
		t.Fatalf("first event %s, %v", b, err)
	}
	if _, reserved := tenant(); reserved != 1000 {
		t.Fatalf("the second session reserves %d, want 1000", reserved)
	}
	_ = d.Write(rctx, websocket.MessageText, []byte(`{"type":"session.update"}`))
	_ = d.Write(rctx, websocket.MessageText, []byte(`{"type":"session.update"}`))
	for {
		if _, _, err := d.Read(rctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusInternalError {
				t.Fatalf("the dropped session ended with %v, want close 1011", err)
			}
			break
		}
	}
	settled(t, addr)
	if balance, reserved := tenant(); reserved != 0 || balance != 10_000-2*responseCost {
		t.Fatalf("after the drop: balance %d, reserved %d", balance, reserved)
	}

	// A client that vanishes (no close frame) releases its hold too.
	v, _, err := dial("voice")
	if err != nil {
		t.Fatal(err)
	}
	if _, b, err := v.Read(rctx); err != nil || !strings.Contains(string(b), "session.created") {
		t.Fatalf("first event %s, %v", b, err)
	}
	if _, reserved := tenant(); reserved != 1000 {
		t.Fatalf("the third session reserves %d, want 1000", reserved)
	}
	_ = v.CloseNow()
	settled(t, addr)
	if balance, reserved := tenant(); reserved != 0 || balance != 10_000-2*responseCost {
		t.Fatalf("after the client vanished: balance %d, reserved %d", balance, reserved)
	}
}
