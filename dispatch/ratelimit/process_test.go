package ratelimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit/hopproc"
	"github.com/hopgate/hopgate/internal/testkit/redistest"
)

// DESIGN §16 across replicas, for real: `hopgate serve` OS processes (not
// gateways in the test's process) sharing one throwaway Redis. The
// in-process versions of these tests live in dispatch/gateway; these
// prove the same of the binary operators run.

// replica is one running `hopgate serve`.
type replica struct{ *hopproc.Proc }

// client is the test's HTTP client; its idle connections are closed at the
// end of each test (goleak).
var client = &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}

// startReplica runs `hopgate serve` with tenant team-a limited to rpm
// requests a minute in the Redis at url, until the test ends.
func startReplica(t *testing.T, url, upstreamURL, onErr string, rpm int) *replica {
	t.Helper()
	yml := fmt.Sprintf(`listen: "{{listen}}"
admin_listen: "{{admin}}"
auth:
  keys:
    - {id: team-a, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
channels:
  - {id: a, base_url: %q}
models:
  - name: m
    chain: [{channel: a, upstream_model: m}]
rate_limits:
  store: redis
  url_env: HOPGATE_TEST_REDIS
  on_store_error: %s
  tenants:
    - {tenant: team-a, rpm: %d}
`, upstreamURL+"/v1", onErr, rpm)
	t.Cleanup(client.CloseIdleConnections)
	return &replica{hopproc.Start(t, yml, "HOPGATE_TEST_REDIS="+url)}
}

// post sends one chat request as team-a and returns the status and body.
func (r *replica) post(t *testing.T) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer test")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *replica) metrics(t *testing.T) string {
	t.Helper()
	resp, err := client.Get("http://" + r.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func fakeUpstream(t *testing.T) (string, *upstream.Server) {
	t.Helper()
	fake := upstream.New(upstream.Options{Name: "a", Models: []string{"m"}})
	srv := httptest.NewServer(fake)
	t.Cleanup(func() { srv.Close(); fake.Close() })
	return srv.URL, fake
}

// Why: two replicas share the tenant's window through Redis: between
// them they serve exactly its rpm and refuse the rest with 429
// rate_limit_exceeded, and a refused request never reaches the upstream.
func TestProcessesShareTheTenantLimit(t *testing.T) {
	rds := redistest.New(t)
	up, fake := fakeUpstream(t)
	reps := []*replica{startReplica(t, rds.URL(), up, "allow", 6), startReplica(t, rds.URL(), up, "allow", 6)}
	counts := map[int]int{}
	for i := range 10 {
		st, body := reps[i%2].post(t)
		counts[st]++
		if st == http.StatusTooManyRequests && !strings.Contains(body, "rate_limit_exceeded") {
			t.Errorf("429 body %s, want rate_limit_exceeded", body)
		}
	}
	if counts[200] != 6 || counts[429] != 4 {
		t.Fatalf("statuses %v, want 6×200 and 4×429 across both processes", counts)
	}
	if n := fake.Attempts("m"); n != 6 {
		t.Fatalf("the upstream saw %d requests, want the 6 admitted", n)
	}
}

// Why: Redis restarted under load, then gone. With on_store_error allow
// no request of either replica fails for it (counted and logged); with
// deny a request is 503 and reaches nothing; and once Redis is back the
// limit holds again across both replicas.
func TestProcessesSurviveRedisRestartAndLoss(t *testing.T) {
	rds := redistest.New(t)
	up, _ := fakeUpstream(t)
	const rpm = 40
	reps := []*replica{startReplica(t, rds.URL(), up, "allow", rpm), startReplica(t, rds.URL(), up, "allow", rpm)}
	deny := startReplica(t, rds.URL(), up, "deny", rpm)

	var mu sync.Mutex
	statuses := map[int]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				st, _ := reps[w%2].post(t)
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			}
		}()
	}
	rds.Stop()
	rds.Start()
	rds.Stop()
	for _, r := range reps {
		for range 3 {
			if st, body := r.post(t); st != 200 && st != 429 {
				t.Errorf("while Redis is gone (allow): %d %s", st, body)
			}
		}
	}
	if st, body := deny.post(t); st != 503 || !strings.Contains(body, "on_store_error is deny") {
		t.Errorf("while Redis is gone (deny): %d %s, want 503 naming on_store_error", st, body)
	}
	close(stop)
	wg.Wait()
	for st := range statuses {
		if st != 200 && st != 429 {
			t.Errorf("statuses under the restart %v: want only 200 and 429", statuses)
			break
		}
	}
	for i, r := range reps {
		if m := r.metrics(t); !strings.Contains(m, `hopgate_ratelimit_store_errors_total{decision="allow"`) {
			t.Errorf("replica %d counted no store error", i)
		}
		if !strings.Contains(r.Logs.String(), "rate limits: the counter store failed") {
			t.Errorf("replica %d logged no store failure", i)
		}
	}
	if m := deny.metrics(t); !strings.Contains(m, `hopgate_ratelimit_store_errors_total{decision="deny"`) {
		t.Error("the deny replica counted no store error")
	}

	// Back: a fresh Redis (the throwaway server keeps nothing), and the
	// limit holds across both replicas again.
	rds.Start()
	served, refused := 0, 0
	for i := 0; i < 3*rpm && refused == 0; i++ {
		switch st, body := reps[i%2].post(t); st {
		case 200:
			served++
		case 429:
			refused++
		default:
			t.Fatalf("after Redis came back: %d %s", st, body)
		}
	}
	if refused == 0 || served > rpm {
		t.Fatalf("after Redis came back: %d served before the first 429, want at most %d", served, rpm)
	}
}
