package wallet_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// Why: issue 35's acceptance, bounded: two gateway processes on one real
// PostgreSQL, five tenants under load (buffered and streamed answers),
// replica A SIGKILLed in a loop and restarted (moneyKills, 10 by default;
// HOPGATE_MONEY_KILLS for a longer run), PostgreSQL restarted under load,
// then A stopped with SIGTERM while the store is down with streams in
// flight. After A restarts on its journal and the holds expire, for every
// tenant: balance = top-ups − charges (and Verify), no charge without a
// complete answer at its client, every complete answer either charged or
// in doubt, nothing reserved; the journals drained. One tenant has a small
// wallet and sends no max_tokens, so its answers overrun their holds
// until it gets 402: its ledger is checked against the overspend bound
// exactly as docs/tenants.md states it (overspendBound). Nothing here
// asserts a duration: each step waits for answers, not for time.
func TestMoneyUnderKillsAndOutages(t *testing.T) {
	hopgateBinary(t) // skipped under -short
	e := newE2E(t, "postgres")
	cluster := pgtest.New(t)
	e.dsn = cluster.NewDatabase(t)
	e.st = e.openStore()
	ctx := context.Background()
	const topUp, smallTopUp = 1_000_000_000, 2_000
	tenants := []moneyTenant{{name: "acme", key: acmeKey, topUp: topUp}}
	for _, name := range []string{"globex", "initech", "umbrella"} {
		tenants = append(tenants, moneyTenant{name: name, key: "hg-e2e-" + name + "-0123456789", topUp: topUp})
	}
	// The small one: no max_tokens, on model hm whose answers have 40
	// tokens against a hold of reserve_output_tokens (2): each answer
	// overruns its hold, until the wallet is empty and it gets 402.
	tenants = append(tenants, moneyTenant{name: "hooli", key: "hg-e2e-hooli-0123456789", topUp: smallTopUp,
		body: func(stream bool) string {
			s := `{"model":"hm","messages":[{"role":"user","content":"two words"}]`
			if stream {
				s += `,"stream":true`
			}
			return s + "}"
		}})
	for _, tn := range tenants {
		if _, err := e.st.CreateTenant(ctx, tn.name, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.TopUp(ctx, tn.name, tn.topUp, "test"); err != nil {
			t.Fatal(err)
		}
	}
	jdirA, jdirB := t.TempDir(), t.TempDir()
	yml := func(model, dir string) string {
		return moneyKeys(e.processYAML(model, `  - name: hm
    chain: [{channel: a, upstream_model: "m|tokens=40|frame-delay=2ms", price: {input: 0.1, output: 0.2}}]
    price: {input: 1, output: 2}
billing: {hold_ttl: 1m, reserve_output_tokens: 2, journal_dir: `+dir+`}
`), tenants)
	}
	const loadModel = "m|tokens=6|frame-delay=5ms"
	a, b := e.startProcess(yml(loadModel, jdirA)), e.startProcess(yml(loadModel, jdirB))
	var addrA atomic.Pointer[string]
	addrA.Store(&a.addr)

	// The load: two clients per tenant, each recording the trace ids of
	// the complete answers; the small tenant's stop at their first 402.
	var mu sync.Mutex
	complete := map[string]bool{}
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * len(tenants) {
		tn := tenants[i%len(tenants)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				addr := b.addr
				if (i+n)%2 == 0 {
					addr = *addrA.Load()
				}
				id, status, ok := oneRequestAs(addr, tn.key, tn.bodyOf(n%2 == 0))
				if ok {
					mu.Lock()
					complete[id] = true
					mu.Unlock()
					done.Add(1)
				}
				if status == http.StatusPaymentRequired {
					if tn.body == nil {
						t.Errorf("tenant %s refused with 402 with its wallet far from empty", tn.name)
					}
					return
				}
			}
		}()
	}
	waitDone := func(more int64) {
		t.Helper()
		target := done.Load() + more
		testkit.Poll{Every: 5 * time.Millisecond}.Eventually(t, func() bool { return done.Load() >= target }, "answers under load")
	}

	kills := moneyKills(t)
	for range kills { // SIGKILL A under load, restart it on its journal
		waitDone(25)
		if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-a.done
		a = e.startProcess(yml(loadModel, jdirA))
		addrA.Store(&a.addr)
	}
	waitDone(40)
	if err := cluster.Stop(); err != nil { // PostgreSQL restarted under load
		t.Fatal(err)
	}
	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	waitDone(40)
	close(stop)
	wg.Wait()

	// SIGTERM with the store down, streams in flight on A (slow ones, so
	// that they end while the store is down: their charges go to the
	// journal), one per tenant with a wallet left.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	a = e.startProcess(yml("m|tokens=100|frame-delay=20ms", jdirA))
	type streamResult struct {
		id string
		ok bool
	}
	slow := tenants[:4]
	results := make(chan streamResult, len(slow))
	started := make(chan struct{}, len(slow))
	for _, tn := range slow {
		go func() {
			id, ok := streamAfterFirstAs(a.addr, tn.key, chatBody(true, 100), started)
			results <- streamResult{id, ok}
		}()
	}
	for range slow {
		testkit.Recv(t, started, "a stream on A to start")
	}
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	for range slow {
		r := testkit.Recv(t, results, "a stream on A")
		if r.ok {
			mu.Lock()
			complete[r.id] = true
			mu.Unlock()
		}
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if journalEmpty(t, jdirA) {
		t.Fatal("A stopped with the store down and its streams' charges unsettled, yet its journal is empty")
	}
	if err := cluster.Start(); err != nil {
		t.Fatal(err)
	}
	a = e.startProcess(yml(loadModel, jdirA)) // applies A's journal
	testkit.Eventually(t, func() bool { return journalEmpty(t, jdirA) }, "A's journal drained after the restart")

	// The holds of the killed processes expire (on a surviving replica's
	// clock, past hold_ttl); delivering ones become in-doubt rows.
	if _, err := e.st.ExpireHolds(ctx, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	charged, inDoubt := map[string]bool{}, map[string]bool{}
	for _, tc := range tenants {
		tn, err := e.st.Tenant(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		led, err := e.st.Ledger(ctx, tc.name, 0)
		if err != nil {
			t.Fatal(err)
		}
		doubts, err := e.st.InDoubtCharges(ctx, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		charges := 0
		for _, row := range led {
			if row.Kind != store.KindCharge {
				continue
			}
			id, _, _ := strings.Cut(row.RequestID, "-")
			if charged[id] {
				t.Errorf("request %s charged twice", row.RequestID)
			}
			charged[id] = true
			charges++
			sum -= row.AmountMicros
			if !complete[id] {
				t.Errorf("tenant %s: request %s charged without a complete answer at its client", tc.name, row.RequestID)
			}
		}
		for _, d := range doubts {
			id, _, _ := strings.Cut(d.RequestID, "-")
			if charged[id] {
				t.Errorf("tenant %s: request %s both charged and in doubt", tc.name, d.RequestID)
			}
			if !complete[id] {
				// Marked delivering just before the last write: a kill
				// after the mark may have cut the answer short (that is
				// why it is in doubt), but never before any answer.
				t.Logf("tenant %s: request %s in doubt, its client saw no complete answer", tc.name, d.RequestID)
			}
		}
		if tn.BalanceMicros != tc.topUp-sum || tn.ReservedMicros != 0 {
			t.Errorf("tenant %s %+v: want balance %d − %d, nothing reserved", tc.name, tn, tc.topUp, sum)
		}
		if tc.body != nil {
			bound := overspendBound(t, led)
			if tn.BalanceMicros < -bound {
				t.Errorf("tenant %s overspent: balance %d below the bound -%d", tc.name, tn.BalanceMicros, bound)
			}
			t.Logf("tenant %s: %d charges, balance %d, overspend bound -%d", tc.name, charges, tn.BalanceMicros, bound)
		}
		for _, d := range doubts {
			id, _, _ := strings.Cut(d.RequestID, "-")
			inDoubt[id] = true
		}
	}
	uncharged := 0
	for id := range complete {
		if !charged[id] {
			uncharged++
			if !inDoubt[id] {
				t.Errorf("request %s was answered completely, and is neither charged nor in doubt", id)
			}
		}
	}
	t.Logf("%d tenants, %d kills: %d complete answers, %d charges, %d in doubt, %d answered without a charge (each in doubt)",
		len(tenants), kills, len(complete), len(charged), len(inDoubt), uncharged)
	if !journalEmpty(t, jdirB) {
		t.Error("B's journal holds charges, yet its store was back")
	}
}

// moneyTenant is one tenant of TestMoneyUnderKillsAndOutages: its key, its
// top-up, and its request body (nil: chatBody with max_tokens 6).
type moneyTenant struct {
	name, key string
	topUp     int64
	body      func(stream bool) string
}

func (m moneyTenant) bodyOf(stream bool) string {
	if m.body != nil {
		return m.body(stream)
	}
	return chatBody(stream, 6)
}

// moneyKeys adds the tenants' keys (acme's is there) to a process config.
func moneyKeys(yml string, tenants []moneyTenant) string {
	var keys strings.Builder
	for _, tn := range tenants {
		if tn.key != acmeKey {
			keys.WriteString("    - {id: " + tn.name + "-key, tenant: " + tn.name + ", sha256: " + sha(tn.key) + "}\n")
		}
	}
	const after = "    - {id: acme-key, tenant: acme, sha256: "
	i := strings.Index(yml, after)
	j := i + strings.IndexByte(yml[i:], '\n') + 1
	return yml[:j] + keys.String() + yml[j:]
}

// moneyKills is how many times the money test SIGKILLs replica A: 10 keep
// it within about a minute under make test; HOPGATE_MONEY_KILLS=36 is the
// issue's own run.
func moneyKills(t *testing.T) int {
	t.Helper()
	v := os.Getenv("HOPGATE_MONEY_KILLS")
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("HOPGATE_MONEY_KILLS=%q: want a count of kills ≥ 1", v)
	}
	return n
}

// oneRequest sends a buffered or streamed chat request and reports its
// trace id and whether its client got the complete answer.
func oneRequest(addr string, stream bool) (string, bool) {
	return oneRequestBody(addr, chatBody(stream, 6))
}

func oneRequestBody(addr, body string) (string, bool) {
	id, _, ok := oneRequestAs(addr, acmeKey, body)
	return id, ok
}

// oneRequestAs is oneRequestBody with tenant key key; it reports the
// status too (0: no answer).
func oneRequestAs(addr, key, body string) (string, int, bool) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := streamClient.Do(req)
	if err != nil {
		return "", 0, false
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, rerr := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if rerr != nil {
			if rerr != io.EOF && !(strings.Contains(body, `"stream":true`) && streamDelivered(sb.String())) {
				return "", resp.StatusCode, false
			}
			break
		}
	}
	id := resp.Header.Get("X-Request-Id")
	s := sb.String()
	if resp.StatusCode != http.StatusOK {
		return id, resp.StatusCode, false
	}
	if strings.Contains(body, `"stream":true`) {
		return id, resp.StatusCode, strings.HasSuffix(s, "data: [DONE]\n\n")
	}
	return id, resp.StatusCode, strings.Contains(s, `"finish_reason"`) && strings.HasSuffix(strings.TrimSpace(s), "}")
}

// streamAfterFirst is oneRequestBody for a stream that signals started
// once its first content frame arrived.
func streamAfterFirst(addr, body string, started chan<- struct{}) (string, bool) {
	return streamAfterFirstAs(addr, acmeKey, body, started)
}

// streamAfterFirstAs is streamAfterFirst with tenant key key.
func streamAfterFirstAs(addr, key, body string, started chan<- struct{}) (string, bool) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := streamClient.Do(req)
	if err != nil {
		started <- struct{}{}
		return "", false
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var sb strings.Builder
	signalled := false
	for {
		line, err := rd.ReadString('\n')
		sb.WriteString(line)
		if !signalled && strings.Contains(line, "tok1 ") {
			signalled = true
			started <- struct{}{}
		}
		if err != nil {
			if !signalled {
				started <- struct{}{}
			}
			return resp.Header.Get("X-Request-Id"), streamDelivered(sb.String())
		}
	}
}

// streamDelivered reports whether a chat stream's client has the whole
// answer: its last bytes are the closing frame. The read may still end in
// an error: net/http writes the chunked body's terminator after the
// handler returns, after the charge is final, so a kill between the two
// leaves a client holding every frame, [DONE] included, whose transport
// says "unexpected EOF". The answer was delivered (an SSE client stops at
// [DONE]); docs/tenants.md, the delivery rule.
func streamDelivered(body string) bool { return strings.HasSuffix(body, "data: [DONE]\n\n") }

func journalEmpty(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "unsettled.jsonl"))
	return err == nil && len(b) == 0
}
