// Command hopgate is an OpenAI-compatible LLM gateway that fails over
// across channels so callers never write retry logic.
//
//	hopgate serve --config FILE   run the gateway
//	hopgate check --config FILE   validate a config and print every chain
//	hopgate tenants …             tenants, wallets, keys and the ledger in the store
//	hopgate demo                  gateway + fake channels + a scripted incident
//	hopgate version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "tenants":
		return tenants(args[1:], stdout, stderr)
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "hopgate", version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "hopgate: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  hopgate serve --config FILE [--drain-timeout 30s]   run the gateway
  hopgate check --config FILE                         validate; print every model's resolved chain
  hopgate tenants COMMAND --config FILE               tenants, wallets, keys and the ledger (hopgate tenants help)
  hopgate demo                                        gateway + in-process fake channels + a scripted incident
  hopgate version
`)
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "hopgate check: --config FILE is required")
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		reportConfigError(stderr, *path, err)
		return 1
	}
	if err := cfg.WriteChains(stdout); err != nil {
		fmt.Fprintln(stderr, "hopgate check:", err)
		return 1
	}
	return 0
}

// reportConfigError prints every config mistake with its line.
func reportConfigError(w io.Writer, path string, err error) {
	var list config.ErrorList
	if errors.As(err, &list) {
		fmt.Fprintf(w, "%s: %d error(s):\n", path, len(list))
		for _, e := range list {
			fmt.Fprintf(w, "  %s:%d: %s\n", path, e.Line, e.Msg)
		}
		return
	}
	fmt.Fprintf(w, "%s: %v\n", path, err)
}

// logOTelErrors sends what OpenTelemetry reports it could not do (a trace
// export the collector refused, a batch that never got an answer) to the
// JSON log. Its default handler prints plain text to stderr, which a log
// pipeline parsing JSON drops or cannot alert on.
func logOTelErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Error("opentelemetry", slog.Any("error", err))
	}))
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight requests and streams may take to finish")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "hopgate serve: --config FILE is required")
		return 2
	}
	log := telemetry.NewLogger(stderr, slog.LevelInfo)
	logOTelErrors(log)
	// Before the gateway starts: the buffer budget is a share of it.
	if lim, err := memoryLimit(os.Getenv); err != nil {
		fmt.Fprintln(stderr, "hopgate serve:", err)
		return 2
	} else if lim > 0 {
		debug.SetMemoryLimit(lim)
		log.Info("memory limit set", slog.Int64("bytes", lim), slog.String("from", "HOPGATE_MEMORY_LIMIT"))
	}
	cfg, err := config.Load(*path)
	if err != nil {
		reportConfigError(stderr, *path, err)
		return 1
	}
	ctx := context.Background()
	g, err := gateway.Start(ctx, cfg, gateway.Options{Version: version, Logger: log, DrainTimeout: *drain})
	if err != nil {
		log.Error("start failed", slog.Any("error", err))
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-g.Errors():
			log.Error("listener failed", slog.Any("error", err))
			_ = g.Shutdown(ctx)
			return 1
		case s := <-sigs:
			if s == syscall.SIGHUP {
				// Reload atomically: a bad file is rejected and the config
				// in force keeps serving.
				next, err := config.Load(*path)
				if err != nil {
					log.Error("config reload rejected; keeping the config in force", slog.Any("error", err))
					continue
				}
				if err := g.Reload(next); err != nil {
					log.Error("config reload rejected; keeping the config in force", slog.Any("error", err))
				}
				continue
			}
			log.Info("draining", slog.String("signal", s.String()), slog.Duration("drain_timeout", *drain))
			if err := g.Shutdown(ctx); err != nil {
				log.Error("shutdown", slog.Any("error", err))
				return 1
			}
			log.Info("drained; bye")
			return 0
		}
	}
}
