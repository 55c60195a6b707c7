package wallet_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
)

// slowToReturn is the upstream transport of handlers that are slow to
// return once their request is cut: a read of an answer that fails (the
// drain timeout closed the client's connection, which cancels the hop)
// returns only once release is closed. It stands for any handler still
// on its way out when the drain timeout has passed, and takes the order
// of the handler's settle and the store's close out of the scheduler's
// hands.
type slowToReturn struct {
	next    http.RoundTripper
	release chan struct{}
}

func (s *slowToReturn) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		resp.Body = &lateFailure{ReadCloser: resp.Body, release: s.release}
	}
	return resp, err
}

type lateFailure struct {
	io.ReadCloser
	release <-chan struct{}
}

func (b *lateFailure) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		<-b.release
	}
	return n, err
}

// logWatch passes records on to a handler and closes seen at the first
// whose message starts with prefix.
type logWatch struct {
	slog.Handler
	prefix string
	once   *sync.Once
	seen   chan struct{}
}

func newLogWatch(h slog.Handler, prefix string) *logWatch {
	return &logWatch{Handler: h, prefix: prefix, once: &sync.Once{}, seen: make(chan struct{})}
}

func (w *logWatch) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, w.prefix) {
		w.once.Do(func() { close(w.seen) })
	}
	return w.Handler.Handle(ctx, r)
}

func (w *logWatch) WithAttrs(a []slog.Attr) slog.Handler {
	c := *w
	c.Handler = w.Handler.WithAttrs(a)
	return &c
}

func (w *logWatch) WithGroup(name string) slog.Handler {
	c := *w
	c.Handler = w.Handler.WithGroup(name)
	return &c
}

// Why: a stream still open when the drain timeout passes is cut, and its
// handler settles after that. The charge must land in the store (the
// wallet, then the store, close only once every request that reserved has
// settled), not in an ERROR log line because the store was closed under
// the handler; and the handler must not outlive the shutdown.
func TestDrainSettlesCutStreams(t *testing.T) {
	drivers(t, func(t *testing.T, driver string) {
		e := newE2E(t, driver)
		ctx := context.Background()
		const topUp = 1_000_000
		if _, err := e.st.CreateTenant(ctx, "acme", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.TopUp(ctx, "acme", topUp, "test"); err != nil {
			t.Fatal(err)
		}
		up := &slowToReturn{next: dispatch.NewTransport(), release: make(chan struct{})}
		client := &http.Client{Transport: &http.Transport{}}
		var logs testkit.SyncBuffer
		watch := newLogWatch(slog.NewJSONHandler(&logs, nil), "wallet: waiting for")
		leaks := goleak.IgnoreCurrent()
		g := e.startWith(e.configYAML("m|tokens=20|stall=1h", "ok", ""), t0, func(o *gateway.Options) {
			o.Transport, o.Logger = up, slog.New(watch)
			// The stream stalls for an hour: the drain times out whatever
			// its length, so it is short.
			o.DrainTimeout = 10 * time.Millisecond
		})

		// Half the answer arrives, then the upstream stalls.
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.Addr()+"/v1/chat/completions", strings.NewReader(chatBody(true, 50)))
		req.Header.Set("Authorization", "Bearer "+acmeKey)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for !strings.Contains(sc.Text(), "tok10 ") {
			if !sc.Scan() {
				t.Fatalf("stream ended before the stall: %v", sc.Err())
			}
		}

		shut := make(chan error, 1)
		go func() { shut <- g.Shutdown(ctx) }()
		var returnedEarly bool
		var shutErr error
		select {
		case <-watch.seen: // the wallet waits for the cut stream's handler
		case shutErr = <-shut:
			returnedEarly = true
		case <-time.After(testkit.Bound):
			t.Fatalf("Shutdown neither waited for the handler nor returned; logs:\n%s", logs.String())
		}
		close(up.release)
		if !returnedEarly {
			shutErr = testkit.Recv(t, shut, "Shutdown to return once the handler settled")
		}
		testkit.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"request"`) },
			"the cut stream's handler to end")

		tn := e.tenant()
		led, err := e.st.Ledger(ctx, "acme", 0)
		if err != nil {
			t.Fatal(err)
		}
		var charges []store.LedgerEntry
		for _, row := range led {
			if row.Kind == store.KindCharge {
				charges = append(charges, row)
			}
		}
		if len(charges) != 1 || charges[0].AmountMicros >= 0 || !charges[0].Estimated ||
			tn.BalanceMicros != topUp+charges[0].AmountMicros || tn.ReservedMicros != 0 {
			t.Fatalf("after the drain: tenant %+v, charges %+v; want one estimated charge, applied, nothing reserved (Shutdown returned before the settle: %v); logs:\n%s",
				tn, charges, returnedEarly, logs.String())
		}
		if returnedEarly || shutErr != nil {
			t.Fatalf("Shutdown returned before the settle: %v, error %v", returnedEarly, shutErr)
		}
		if strings.Contains(logs.String(), `"level":"ERROR"`) {
			t.Fatalf("error logged during the drain:\n%s", logs.String())
		}
		if err := e.st.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_ = g.tel.Shutdown(ctx)
		up.next.(*http.Transport).CloseIdleConnections()
		client.CloseIdleConnections()
		if err := goleak.Find(leaks); err != nil {
			t.Fatalf("goroutines outlived the drain: %v", err)
		}
	})
}
