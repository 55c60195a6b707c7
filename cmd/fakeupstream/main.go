// Command fakeupstream runs a fake model provider whose faults are chosen
// per request by the model name ("gpt-4o-mini|503-once",
// "m|tokens=60|cut=40", "m|429:ra=7", ...). It is the upstream of the demo,
// the soak test and the benchmarks; tests use package upstream in-process.
// One listener speaks five dialects, chosen by the URL path: OpenAI
// (/v1/...), Azure OpenAI (/openai/deployments/..., /openai/responses,
// /openai/v1/...), Anthropic (/v1/messages), Bedrock
// (/model/{id}/invoke...) and Vertex AI
// (/v1/projects/.../publishers/anthropic/models/...:rawPredict, with its
// token endpoint at /token).
//
// Usage:
//
//	fakeupstream [-listen 127.0.0.1:8401] [-name backup-us] [-frame-delay 20ms] [-api-key KEY]
//	             [-azure-api-key KEY] [-azure-ad-token TOKEN] [-anthropic-api-key KEY] [-aws-access-key-id ID]
//	             [-aws-secret-access-key SECRET] [-aws-region REGION] [-google-project P]
//	             [-google-service-account FILE]
//
// Point a hopgate channel at it with base_url http://127.0.0.1:8401/v1
// (openai) or http://127.0.0.1:8401 (the other families) and name the
// fault in the chain entry's upstream_model. -google-service-account writes
// a key file whose token_uri points at this listener, for a vertex channel's
// GOOGLE_APPLICATION_CREDENTIALS. The full grammar is in the package doc of
// github.com/hopgate/hopgate/cmd/fakeupstream/upstream and in
// `fakeupstream -help`. It logs one line per request and stops on SIGINT or
// SIGTERM.
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
	azureKey := fs.String("azure-api-key", upstream.DefaultAzureAPIKey, "api-key accepted by the Azure dialect")
	azureToken := fs.String("azure-ad-token", upstream.DefaultAzureADToken, "Entra ID bearer token accepted by the Azure dialect")
	anthropicKey := fs.String("anthropic-api-key", upstream.DefaultAnthropicAPIKey, "x-api-key accepted by the Anthropic dialect")
	awsKeyID := fs.String("aws-access-key-id", upstream.DefaultAWSAccessKeyID, "access key whose SigV4 signatures the Bedrock dialect accepts")
	awsSecret := fs.String("aws-secret-access-key", upstream.DefaultAWSSecretAccessKey, "secret of -aws-access-key-id")
	awsRegion := fs.String("aws-region", upstream.DefaultAWSRegion, "region Bedrock signatures must be scoped to")
	googleProject := fs.String("google-project", upstream.DefaultGoogleProject, "project the Vertex dialect serves")
	googleSA := fs.String("google-service-account", "", "if set, write a service-account key file here whose token_uri is this listener")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fakeupstream [flags]\n\nA fake model provider (OpenAI, Azure, Anthropic, Bedrock, Vertex by URL path); faults are chosen by the model name.\n\nFlags:\n")
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
		Name:               *name,
		FrameDelay:         *frameDelay,
		APIKey:             *apiKey,
		LogLimit:           *logLimit,
		AzureAPIKey:        *azureKey,
		AzureADToken:       *azureToken,
		AnthropicAPIKey:    *anthropicKey,
		AWSAccessKeyID:     *awsKeyID,
		AWSSecretAccessKey: *awsSecret,
		AWSRegion:          *awsRegion,
		GoogleProject:      *googleProject,
		OnRequest: func(r upstream.Request) {
			logger.Info("request", "dialect", r.Dialect, "method", r.Method, "path", r.Path, "model", r.Effective,
				"stream", r.Stream, "attempt", r.Attempt, "traceparent", r.Header.Get("Traceparent"))
		},
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *googleSA != "" {
		sa, err := fake.ServiceAccountJSON("http://" + ln.Addr().String())
		if err == nil {
			err = os.WriteFile(*googleSA, sa, 0o600)
		}
		if err != nil {
			ln.Close()
			return err
		}
		logger.Info("wrote service account key file", "path", *googleSA)
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
