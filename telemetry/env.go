package telemetry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/otlpwire"
)

// Standard OpenTelemetry SDK environment variables read through
// Options.Getenv, so tests inject them instead of mutating the process.
// Over http/protobuf (the default) hopgate's own exporter sends, and every
// OTEL_EXPORTER_OTLP_* setting comes through Getenv; over grpc the SDK's
// exporter still reads its secondary settings (headers, certificates,
// timeout, compression) from the process environment itself. Two things
// are read from the process environment either way: HTTPS_PROXY/NO_PROXY
// (by the exporter's HTTP transport, as net/http does) and the batch
// processor's OTEL_BSP_* (by the SDK), but OTEL_BSP_MAX_QUEUE_SIZE, which
// hopgate reads through Getenv to size its export queue (exportqueue.go).
const (
	envSDKDisabled       = "OTEL_SDK_DISABLED"
	envServiceName       = "OTEL_SERVICE_NAME"
	envResourceAttrs     = "OTEL_RESOURCE_ATTRIBUTES"
	envTracesExporter    = "OTEL_TRACES_EXPORTER"
	envEndpoint          = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint    = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol          = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol    = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envTracesSampler     = "OTEL_TRACES_SAMPLER"
	envTracesSamplerArg  = "OTEL_TRACES_SAMPLER_ARG"
	envHeaders           = "OTEL_EXPORTER_OTLP_HEADERS"
	envTracesHeaders     = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	envTimeout           = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout     = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envCompression       = "OTEL_EXPORTER_OTLP_COMPRESSION"
	envTracesCompression = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"
	envCertificate       = "OTEL_EXPORTER_OTLP_CERTIFICATE"
	envTracesCertificate = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"
	envClientCert        = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
	envTracesClientCert  = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"
	envClientKey         = "OTEL_EXPORTER_OTLP_CLIENT_KEY"
	envTracesClientKey   = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"
	defaultHTTPEndpoint  = "http://localhost:4318/v1/traces"
	defaultServiceName   = "hopgate"
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"

	// envOTLPEncoder is hopgate's escape hatch: "sdk" sends http/protobuf
	// traces with the OpenTelemetry SDK's exporter (otlptracehttp) instead
	// of hopgate's own encoder (internal/otlpwire), should the two ever
	// disagree. The SDK's exporter then reads its secondary settings
	// (headers, certificates, timeout, compression) from the process
	// environment itself, as over grpc.
	envOTLPEncoder = "HOPGATE_OTLP_ENCODER"
	encoderHopgate = "hopgate"
	encoderSDK     = "sdk"
)

// Exporter kinds chosen by spanExporterFromEnv.
const (
	exporterNone     = "none"
	exporterDisabled = "disabled"
	exporterConsole  = "console"
	exporterGRPC     = "otlp/grpc"
	exporterHTTP     = "otlp/http"
	exporterHTTPSDK  = "otlp/http (sdk)"
)

func envTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

// spanExporterFromEnv picks the span exporter. No OTEL_TRACES_EXPORTER and no
// endpoint means no exporter: a gateway without a trace backend still creates
// spans (trace ids, failover log) but ships them nowhere. An explicit
// OTEL_TRACES_EXPORTER=otlp without an endpoint uses the specification's
// default endpoint (http://localhost:4318 over http/protobuf). Over HTTP
// the URL's scheme decides TLS; OTEL_EXPORTER_OTLP_INSECURE applies to
// gRPC only, as the specification says.
//
// clock, when not nil, times the OTLP/HTTP exporter's retries (pauses and
// the one-minute budget).
func spanExporterFromEnv(ctx context.Context, getenv func(string) string, userAgent string, clock clockwork.Clock) (sdktrace.SpanExporter, string, error) {
	if envTrue(getenv(envSDKDisabled)) {
		return nil, exporterDisabled, nil
	}
	kind := strings.ToLower(strings.TrimSpace(getenv(envTracesExporter)))
	// The spec allows a comma-separated list; hopgate supports exactly one.
	if i := strings.IndexByte(kind, ','); i >= 0 {
		return nil, "", fmt.Errorf("%s=%q: only one traces exporter is supported", envTracesExporter, kind)
	}
	endpoint, signalEndpoint := strings.TrimSpace(getenv(envTracesEndpoint)), true
	if endpoint == "" {
		endpoint, signalEndpoint = strings.TrimSpace(getenv(envEndpoint)), false
	}
	switch kind {
	case "none":
		return nil, exporterNone, nil
	case "console":
		return newConsoleExporter(os.Stderr), exporterConsole, nil
	case "":
		if endpoint == "" {
			return nil, exporterNone, nil
		}
	case "otlp":
	default:
		return nil, "", fmt.Errorf("%s=%q: want otlp, console or none", envTracesExporter, kind)
	}

	protocol := strings.TrimSpace(getenv(envTracesProtocol))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv(envProtocol))
	}
	switch protocol {
	case protocolGRPC:
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			if strings.Contains(endpoint, "://") {
				opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
			} else {
				opts = append(opts, otlptracegrpc.WithEndpoint(endpoint)) // host:port, common for gRPC
			}
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, "", fmt.Errorf("otlp/grpc exporter: %w", err)
		}
		return exp, exporterGRPC, nil
	case "", protocolHTTPProtobuf: // the spec's default
		u := defaultHTTPEndpoint
		if endpoint != "" {
			u = endpoint
			if !signalEndpoint {
				// The generic endpoint is a base URL: the signal path is appended.
				u = strings.TrimSuffix(u, "/") + "/v1/traces"
			}
		}
		switch enc := strings.ToLower(strings.TrimSpace(getenv(envOTLPEncoder))); enc {
		case "", encoderHopgate:
		case encoderSDK:
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u),
				otlptracehttp.WithHeaders(map[string]string{"User-Agent": userAgent}))
			if err != nil {
				return nil, "", fmt.Errorf("otlp/http exporter (sdk): %w", err)
			}
			return exp, exporterHTTPSDK, nil
		default:
			return nil, "", fmt.Errorf("%s=%q: want hopgate or sdk", envOTLPEncoder, enc)
		}
		cfg, err := otlpHTTPConfig(getenv, u, userAgent)
		if err != nil {
			return nil, "", err
		}
		if clock != nil {
			cfg.Now = clock.Now
			cfg.Wait = func(ctx context.Context, d time.Duration) error {
				t := clock.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.Chan():
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		exp, err := otlpwire.New(cfg)
		if err != nil {
			return nil, "", err
		}
		return exp, exporterHTTP, nil
	default:
		return nil, "", fmt.Errorf("%s=%q: want grpc or http/protobuf", envProtocol, protocol)
	}
}

// signalEnv is the traces-specific variable if set, else the generic one:
// the OTLP exporter specification's precedence, per setting.
func signalEnv(getenv func(string) string, traces, generic string) (name, value string) {
	if v := strings.TrimSpace(getenv(traces)); v != "" {
		return traces, v
	}
	return generic, strings.TrimSpace(getenv(generic))
}

// otlpHTTPConfig reads the OTLP/HTTP exporter settings of the OTLP
// exporter specification. A value that cannot be used is an error: a typo
// in a header or a certificate path would otherwise lose every trace
// quietly.
func otlpHTTPConfig(getenv func(string) string, endpoint, userAgent string) (otlpwire.Config, error) {
	cfg := otlpwire.Config{URL: endpoint, UserAgent: userAgent}
	if name, v := signalEnv(getenv, envTracesHeaders, envHeaders); v != "" {
		h, err := parseOTLPHeaders(v)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", name, err)
		}
		cfg.Header = h
	}
	if name, v := signalEnv(getenv, envTracesTimeout, envTimeout); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return cfg, fmt.Errorf("%s=%q: want a positive number of milliseconds", name, v)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}
	switch name, v := signalEnv(getenv, envTracesCompression, envCompression); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		cfg.Gzip = true
	default:
		return cfg, fmt.Errorf("%s=%q: want gzip or none", name, v)
	}
	caName, ca := signalEnv(getenv, envTracesCertificate, envCertificate)
	certName, cert := signalEnv(getenv, envTracesClientCert, envClientCert)
	keyName, key := signalEnv(getenv, envTracesClientKey, envClientKey)
	if ca == "" && cert == "" && key == "" {
		return cfg, nil
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", caName, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return cfg, fmt.Errorf("%s=%q: no PEM certificate in the file", caName, ca)
		}
		tlsCfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return cfg, fmt.Errorf("%s and %s: set both or neither", certName, keyName)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return cfg, fmt.Errorf("%s, %s: %w", certName, keyName, err)
		}
		tlsCfg.Certificates = []tls.Certificate{pair}
	}
	if strings.HasPrefix(strings.ToLower(endpoint), "http://") {
		// Certificates with a plain-HTTP endpoint mean the operator wanted
		// TLS and would silently not get it.
		return cfg, fmt.Errorf("otlp endpoint %q is http://, but TLS settings are given (%s, %s, %s): use https:// or drop them", endpoint, caName, certName, keyName)
	}
	cfg.TLS = tlsCfg
	return cfg, nil
}

// parseOTLPHeaders reads "k1=v1,k2=v2" with percent-encoded values (the
// W3C Baggage format the OTLP specification names).
func parseOTLPHeaders(s string) (http.Header, error) {
	h := http.Header{}
	for pair := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("%q: want key=value pairs separated by commas", pair)
		}
		v, err := url.PathUnescape(v)
		v = strings.TrimSpace(v) // after decoding, as the SDK's exporter did
		if err != nil || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("header %q: the value is not a valid percent-encoded header value", k)
		}
		h.Set(k, v) // a repeated key: the last value, as the SDK's exporter did
	}
	return h, nil
}

// samplerFromEnv reads OTEL_TRACES_SAMPLER/_ARG through getenv. It returns
// the head sampler and the share of HEALTHY traces the configured sampler
// asks for.
//
// hopgate's promise is that every trace with a skip, failover, timeout or
// error is kept, which a head sampler cannot honour: it decides before the
// request has happened. So a ratio sampler (traceidratio,
// parentbased_traceidratio) is applied where it can be: to healthy traces,
// at the end of the request, by the failover-aware processor; the head
// samples every local root. Likewise a remote parent that says "not
// sampled" does not stop a failover trace from being kept (the gateway's part
// of the trace is exported even if the caller's is not). always_off and
// parentbased_always_off are an explicit opt-out of tracing and are honoured.
// Invalid values are errors, not silent fallbacks: a sampler typo would
// otherwise hide every trace.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, float64, error) {
	name := strings.ToLower(strings.TrimSpace(getenv(envTracesSampler)))
	arg := strings.TrimSpace(getenv(envTracesSamplerArg))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("%s=%q: want a ratio in [0, 1]", envTracesSamplerArg, arg)
		}
		return r, nil
	}
	// Every local request reaches the tail decision, whatever its parent says.
	tailDecides := sdktrace.ParentBased(sdktrace.AlwaysSample(),
		sdktrace.WithRemoteParentNotSampled(sdktrace.AlwaysSample()))
	switch name {
	case "", "parentbased_always_on", "always_on":
		return tailDecides, 1, nil
	case "always_off":
		return sdktrace.NeverSample(), 0, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), 0, nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, 0, err
		}
		return tailDecides, r, nil
	default:
		return nil, 0, fmt.Errorf("%s=%q: unsupported sampler", envTracesSampler, name)
	}
}

// resourceAttrs builds the resource: service.name hopgate unless
// OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME (which wins, per spec) says
// otherwise; service.version and cloud.region from Options when set, since the
// config file is the source of truth for the gateway's region.
func resourceAttrs(getenv func(string) string, o Options) ([]attribute.KeyValue, error) {
	attrs := map[string]string{"service.name": defaultServiceName}
	if raw := strings.TrimSpace(getenv(envResourceAttrs)); raw != "" {
		for pair := range strings.SplitSeq(raw, ",") {
			k, v, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("%s: malformed pair %q", envResourceAttrs, pair)
			}
			dv, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("%s: value of %q: %w", envResourceAttrs, k, err)
			}
			attrs[k] = dv
		}
	}
	if v := strings.TrimSpace(getenv(envServiceName)); v != "" {
		attrs["service.name"] = v
	}
	if o.ServiceVersion != "" {
		attrs["service.version"] = o.ServiceVersion
	}
	if o.Region != "" {
		attrs["cloud.region"] = o.Region
	}
	kvs := make([]attribute.KeyValue, 0, len(attrs))
	for k, v := range attrs {
		kvs = append(kvs, attribute.String(k, v))
	}
	return kvs, nil
}
