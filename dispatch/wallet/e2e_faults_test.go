package wallet_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// Why: issue 35's acceptance, bounded: two gateway processes on one real
// PostgreSQL, under load (buffered and streamed answers), replica A
// SIGKILLed in a loop and restarted, PostgreSQL restarted under load, then
// A stopped with SIGTERM while the store is down with streams in flight.
// After A restarts on its journal and the holds expire: balance = top-ups
// − charges (Verify), no charge without a complete answer at its client,
// every complete answer either charged or in doubt, the journal drained,
// nothing reserved.
func TestMoneyUnderKillsAndOutages(t *testing.T) {
	hopgateBinary(t) // skipped under -short
	e := newE2E(t, "postgres")
	cluster := pgtest.New(t)
	e.dsn = cluster.NewDatabase(t)
	e.st = e.openStore()
	ctx := context.Background()
	if _, err := e.st.CreateTenant(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	const topUp = 1_000_000_000
	if _, err := e.st.TopUp(ctx, "acme", topUp, "test"); err != nil {
		t.Fatal(err)
	}
	jdirA, jdirB := t.TempDir(), t.TempDir()
	yml := func(dir string) string {
		return e.processYAML("m|tokens=6|frame-delay=5ms", "billing: {hold_ttl: 1m, journal_dir: "+dir+"}\n")
	}
	a, b := e.startProcess(yml(jdirA)), e.startProcess(yml(jdirB))
	var addrA atomic.Pointer[string]
	addrA.Store(&a.addr)

	// The load: each client records the trace ids of the complete answers.
	var mu sync.Mutex
	complete := map[string]bool{}
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
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
				if id, ok := oneRequest(addr, n%2 == 0); ok {
					mu.Lock()
					complete[id] = true
					mu.Unlock()
					done.Add(1)
				}
			}
		}()
	}
	waitDone := func(more int64) {
		t.Helper()
		target := done.Load() + more
		testkit.Poll{Every: 5 * time.Millisecond}.Eventually(t, func() bool { return done.Load() >= target }, "answers under load")
	}

	for range 4 { // SIGKILL A under load, restart it on its journal
		waitDone(40)
		if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-a.done
		a = e.startProcess(yml(jdirA))
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
	// journal).
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	a = e.startProcess(e.processYAML("m|tokens=100|frame-delay=20ms", "billing: {hold_ttl: 1m, journal_dir: "+jdirA+"}\n"))
	type streamResult struct {
		id string
		ok bool
	}
	results := make(chan streamResult, 4)
	started := make(chan struct{}, 4)
	for range 4 {
		go func() {
			id, ok := streamAfterFirst(a.addr, chatBody(true, 100), started)
			results <- streamResult{id, ok}
		}()
	}
	for range 4 {
		testkit.Recv(t, started, "a stream on A to start")
	}
	if err := cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
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
	a = e.startProcess(yml(jdirA)) // applies A's journal
	testkit.Eventually(t, func() bool { return journalEmpty(t, jdirA) }, "A's journal drained after the restart")

	// The holds of the killed processes expire (on a surviving replica's
	// clock, past hold_ttl); delivering ones become in-doubt rows.
	if _, err := e.st.ExpireHolds(ctx, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	tn, err := e.st.Tenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	led, _ := e.st.Ledger(ctx, "acme", 0)
	doubts, _ := e.st.InDoubtCharges(ctx, "acme")
	charged := map[string]bool{}
	var sum int64
	for _, row := range led {
		if row.Kind != "charge" {
			continue
		}
		id, _, _ := strings.Cut(row.RequestID, "-")
		charged[id] = true
		sum -= row.AmountMicros
		if !complete[id] {
			t.Errorf("request %s charged without a complete answer at its client", row.RequestID)
		}
	}
	inDoubtIDs := map[string]bool{}
	for _, d := range doubts {
		id, _, _ := strings.Cut(d.RequestID, "-")
		inDoubtIDs[id] = true
	}
	uncharged := 0
	for id := range complete {
		if !charged[id] {
			uncharged++
			if !inDoubtIDs[id] {
				t.Errorf("request %s was answered completely, and is neither charged nor in doubt", id)
			}
		}
	}
	t.Logf("%d complete answers, %d charges, %d in doubt (%d answered without a charge)", len(complete), len(charged), len(doubts), uncharged)
	if tn.BalanceMicros != topUp-sum || tn.ReservedMicros != 0 {
		t.Fatalf("tenant %+v: want balance %d − %d, nothing reserved", tn, topUp, sum)
	}
	if !journalEmpty(t, jdirB) {
		t.Error("B's journal holds charges, yet its store was back")
	}
}

// oneRequest sends a buffered or streamed chat request and reports its
// trace id and whether its client got the complete answer.
func oneRequest(addr string, stream bool) (string, bool) {
	return oneRequestBody(addr, chatBody(stream, 6))
}

func oneRequestBody(addr, body string) (string, bool) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	resp, err := streamClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, rerr := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if rerr != nil {
			if rerr != io.EOF {
				return "", false
			}
			break
		}
	}
	id := resp.Header.Get("X-Request-Id")
	s := sb.String()
	if resp.StatusCode != http.StatusOK {
		return id, false
	}
	if strings.Contains(body, `"stream":true`) {
		return id, strings.HasSuffix(s, "data: [DONE]\n\n")
	}
	return id, strings.Contains(s, `"finish_reason"`) && strings.HasSuffix(strings.TrimSpace(s), "}")
}

// streamAfterFirst is oneRequestBody for a stream that signals started
// once its first content frame arrived.
func streamAfterFirst(addr, body string, started chan<- struct{}) (string, bool) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+acmeKey)
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
			return resp.Header.Get("X-Request-Id"), err == io.EOF && strings.HasSuffix(sb.String(), "data: [DONE]\n\n")
		}
	}
}

func journalEmpty(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "unsettled.jsonl"))
	return err == nil && len(b) == 0
}
