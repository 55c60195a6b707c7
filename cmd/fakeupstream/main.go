// Command fakeupstream runs an OpenAI-compatible fake provider whose faults
// are chosen per request by the model name ("gpt-4o-mini|503-once",
// "m|tokens=60|cut=40", "m|429:ra=7", ...). It is the upstream of the demo,
// the soak test and the benchmarks; tests use package upstream in-process.
//
// Usage:
//
//	fakeupstream [-listen 127.0.0.1:8401] [-name backup-us] [-frame-delay 20ms] [-api-key KEY]
//
// Point a hopgate channel at it with base_url http://127.0.0.1:8401/v1 and
// name the fault in the chain entry's upstream_model. The full grammar is in
// the package doc of github.com/hopgate/hopgate/cmd/fakeupstream/upstream and
// in `fakeupstream -help`. It logs one line per request and stops on SIGINT
// or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakeupstream:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fakeupstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8401", "address to listen on")
	name := fs.String("name", "fake", "channel name, shown in response ids and the X-Fake-Upstream header")
	frameDelay := fs.Duration("frame-delay", 0, "delay between stream frames")
	apiKey := fs.String("api-key", "", "if set, require Authorization: Bearer KEY")
	logLimit := fs.Int("log-limit", 1000, "requests kept in the in-memory request log")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fakeupstream [flags]\n\nAn OpenAI-compatible fake provider; faults are chosen by the model name.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\n%s", upstream.Grammar)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fake := upstream.New(upstream.Options{
		Name:       *name,
		FrameDelay: *frameDelay,
		APIKey:     *apiKey,
		LogLimit:   *logLimit,
		OnRequest: func(r upstream.Request) {
			logger.Info("request", "method", r.Method, "path", r.Path, "model", r.Effective,
				"stream", r.Stream, "attempt", r.Attempt, "traceparent", r.Header.Get("Traceparent"))
		},
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("fakeupstream listening", "addr", ln.Addr().String(), "name", *name)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	fake.Close() // release no-headers, stalls and endless bodies first
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return srv.Close()
	}
	return nil
}
