package wallet_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
)

// The end-to-end tests below run real `hopgate serve` processes, built
// once per test binary from cmd/hopgate.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func hopgateBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs the hopgate binary")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "hopgate-wallet-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "hopgate")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/hopgate/hopgate/cmd/hopgate").CombinedOutput()
		if err != nil {
			buildErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build hopgate: %v", buildErr)
	}
	return binPath
}

// proc is one running `hopgate serve`.
type proc struct {
	cmd         *exec.Cmd
	addr, admin string
	logs        *testkit.SyncBuffer
	done        chan struct{} // closed when the process has exited
	err         error         // its exit status, once done
}

// startProcess writes yml (whose listen and admin_listen must be
// "{{listen}}" and "{{admin}}") to a file and runs `hopgate serve` on it
// with env, until the test ends.
func (e *e2e) startProcess(yml string, env ...string) *proc {
	e.t.Helper()
	bin := hopgateBinary(e.t)
	p := &proc{addr: testkit.LoopbackAddr(e.t), admin: testkit.LoopbackAddr(e.t), logs: &testkit.SyncBuffer{}, done: make(chan struct{})}
	yml = strings.Replace(yml, "{{listen}}", p.addr, 1)
	yml = strings.Replace(yml, "{{admin}}", p.admin, 1)
	path := filepath.Join(e.t.TempDir(), "hopgate.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		e.t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "serve", "--config", path, "--drain-timeout", "10s")
	p.cmd.Env = append(os.Environ(), append(env, "HOPGATE_TEST_DSN="+e.dsn)...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	testkit.Poll{Every: 20 * time.Millisecond}.EventuallyNil(e.t, func() error {
		select {
		case <-p.done:
			return errors.New("hopgate exited: " + fmt.Sprint(p.err) + "\n" + p.logs.String())
		default:
		}
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}, "hopgate ready")
	return p
}

// processYAML is configYAML with placeholders for the process's listeners.
func (e *e2e) processYAML(modelA, extra string) string {
	yml := e.configYAML(modelA, "ok", extra)
	lines := strings.SplitN(yml, "\n", 3)
	return "listen: \"{{listen}}\"\nadmin_listen: \"{{admin}}\"\n" + lines[2]
}

// streamClient opens many connections at once (one per stream).
var streamClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// streamOnce posts a streaming request and reads it to the end; it returns
// the status, the body and the read error.
func streamOnce(addr, key, body string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := streamClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return resp.StatusCode, b.String(), sc.Err()
}

// Why: 200 concurrent streams from one tenant whose wallet covers only
// part of them, spread over two hopgate processes sharing one PostgreSQL:
// every stream is served or refused with 402, the balance never goes
// below the documented overspend bound, balance = top-ups − ledger, one
// ledger row per served stream and none twice, nothing left reserved.
//
// The bound (docs/tenants.md) is checked exactly as stated, from the
// ledger (overspendBound): the balance goes below zero by at most the sum
// of the overruns (charge − hold) of the requests in flight when the
// available amount (balance − reserved) first went below zero. With
// max_tokens on every request no charge exceeds its hold, so it is 0;
// without it, each answer here runs 38 tokens past the reservation's
// estimate.
func TestConcurrentStreamsOnTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		name, upstream, body, extra string
	}{
		{"max_tokens", "m|tokens=8|frame-delay=25ms", chatBody(true, 8), ""},
		{"estimate exceeded", "m|tokens=40|frame-delay=5ms",
			`{"model":"m","messages":[{"role":"user","content":"two words"}],"stream":true}`, "billing: {reserve_output_tokens: 2}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t, "postgres")
			ctx := context.Background()
			e.st.CreateTenant(ctx, "acme", "test")
			const topUp = 2_000 // 0.002 USD: tens of reservations
			e.st.TopUp(ctx, "acme", topUp, "test")
			yml := e.processYAML(tc.upstream, tc.extra)
			a, b := e.startProcess(yml), e.startProcess(yml)
			hold := listPrice.Cost(int64((len(tc.body)+3)/4), 2)
			if tc.extra == "" {
				hold = listPrice.Cost(int64((len(tc.body)+3)/4), 8)
			}

			const n = 200
			type result struct {
				status int
				body   string
				err    error
			}
			results := make([]result, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < n; i++ {
				addr := a.addr
				if i%2 == 1 {
					addr = b.addr
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					s, b, err := streamOnce(addr, acmeKey, tc.body)
					results[i] = result{s, b, err}
				}()
			}
			close(start)
			wg.Wait()
			served, denied := 0, 0
			for i, r := range results {
				switch {
				case r.err != nil:
					t.Fatalf("stream %d: %v", i, r.err)
				case r.status == http.StatusOK && strings.HasSuffix(r.body, "data: [DONE]\n\n"):
					served++
				case r.status == http.StatusPaymentRequired && errorCode(r.body) == "insufficient_balance":
					denied++
				default:
					t.Fatalf("stream %d: %d %s", i, r.status, r.body)
				}
			}
			if served == 0 || denied == 0 {
				t.Fatalf("served %d, denied %d: the wallet should cover part of them", served, denied)
			}
			// A charge lands just after its [DONE] (the delivery rule).
			waitFor(t, "every stream settled", func() bool { return e.tenant().ReservedMicros == 0 })
			tn := e.tenant()
			led, err := e.st.Ledger(ctx, "acme", 0)
			if err != nil {
				t.Fatal(err)
			}
			ids := map[string]bool{}
			var charged int64
			for _, row := range led {
				if row.Kind != "charge" {
					continue
				}
				if ids[row.RequestID] {
					t.Fatalf("request %s charged twice", row.RequestID)
				}
				if row.HeldMicros != hold {
					t.Fatalf("request %s released a hold of %d, want %d (none expired here)", row.RequestID, row.HeldMicros, hold)
				}
				ids[row.RequestID] = true
				charged -= row.AmountMicros
			}
			bound := overspendBound(t, led)
			if tc.extra == "" && bound != 0 {
				t.Fatalf("with max_tokens on every request no charge exceeds its hold, yet the bound is %d", bound)
			}
			t.Logf("served %d, refused %d with 402; balance %d, overspend bound -%d", served, denied, tn.BalanceMicros, bound)
			if len(ids) != served || tn.BalanceMicros != topUp-charged || tn.ReservedMicros != 0 {
				t.Fatalf("%d charges for %d served; balance %d, top-ups %d − charges %d; reserved %d",
					len(ids), served, tn.BalanceMicros, topUp, charged, tn.ReservedMicros)
			}
			if tn.BalanceMicros < -bound {
				t.Fatalf("overspent: balance %d below the bound -%d", tn.BalanceMicros, bound)
			}
			if err := e.st.Verify(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// overspendBound checks docs/tenants.md's overspend bound at every ledger
// row and returns it for the last: while the available amount (balance −
// reserved, both recorded per row) is below zero no hold is admitted, so
// every charge settled then belongs to a request in flight when it went
// below zero; the sum of their overruns (charge − released hold) bounds
// how far the available amount, and so the balance, are below zero.
// Between two rows the available amount only rises while negative
// (releases, expiries) and stays ≥ 0 otherwise (holds must fit), so a row
// at or above zero ends an episode.
func overspendBound(t *testing.T, led []store.LedgerEntry) int64 {
	t.Helper()
	var sum int64
	for i := len(led) - 1; i >= 0; i-- { // oldest first
		row := led[i]
		avail := row.BalanceMicros - row.ReservedMicros
		if avail >= 0 {
			sum = 0
			continue
		}
		if row.Kind == store.KindCharge {
			sum += max(0, -row.AmountMicros-row.HeldMicros)
		}
		if avail < -sum || row.BalanceMicros < -sum {
			t.Fatalf("ledger row %+v: available %d, balance %d below the bound -%d", row, avail, row.BalanceMicros, sum)
		}
	}
	return sum
}

// Why: a replica killed with SIGKILL mid-stream leaves its hold behind,
// never a charge, and never forever: the hold expires at its hold_ttl
// (checked on an injected "now"), and a surviving replica's sweep
// releases it; the survivor charges its own requests once.
func TestSIGKILLMidStream(t *testing.T) {
	drivers(t, func(t *testing.T, driver string) {
		e := newE2E(t, driver)
		ctx := context.Background()
		e.st.CreateTenant(ctx, "acme", "test")
		e.st.TopUp(ctx, "acme", 1_000_000, "test")
		yml := e.processYAML("m|tokens=100|frame-delay=50ms", "billing: {hold_ttl: 1m}\n")
		p := e.startProcess(yml)

		before := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/chat/completions", strings.NewReader(chatBody(true, 100)))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		resp, err := streamClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended before any content: %v", err)
			}
			if strings.Contains(line, "tok2 ") {
				break // mid-stream
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		killed := time.Now()
		if _, err := readAll(rd); err == nil {
			t.Fatal("the stream ended cleanly after SIGKILL")
		}
		resp.Body.Close()

		tn := e.tenant()
		led, _ := e.st.Ledger(ctx, "acme", 0)
		if tn.ReservedMicros == 0 || len(led) != 1 {
			t.Fatalf("after SIGKILL: wallet %+v, ledger %+v (want the hold, no charge)", tn, led)
		}
		// The hold expires at its request's start + hold_ttl, not before.
		if n, err := e.st.ExpireHolds(ctx, before.Add(time.Minute-time.Second)); err != nil || n != 0 {
			t.Fatalf("expired early: %d %v", n, err)
		}
		// A surviving replica, its clock past the expiry, releases it in
		// one sweep (hold_ttl/4).
		g := e.start(e.configYAML("m|tokens=5", "ok", "billing: {hold_ttl: 1m}\n"), killed.Add(time.Minute+time.Second))
		waitFor(t, "the sweep", func() bool {
			g.clock.Advance(15 * time.Second)
			return e.tenant().ReservedMicros == 0
		})
		if r := post(t, g.Addr(), acmeKey, chatBody(false, 5)); r.status != http.StatusOK {
			t.Fatalf("survivor: %d %s", r.status, r.body)
		}
		led, _ = e.st.Ledger(ctx, "acme", 0)
		if tn := e.tenant(); len(led) != 2 || led[0].Kind != "charge" || tn.BalanceMicros != 1_000_000+led[0].AmountMicros || tn.ReservedMicros != 0 {
			t.Fatalf("wallet %+v, ledger %+v", tn, led)
		}
		if err := e.st.Verify(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// readAll reads the rest of a stream: nil at a clean end, the error of a
// connection that broke.
func readAll(rd *bufio.Reader) (string, error) {
	b, err := io.ReadAll(rd)
	return string(b), err
}
