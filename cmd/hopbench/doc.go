// Command hopbench measures what hopgate costs against a bare reverse proxy,
// side by side, with tracing on (`make bench`). It writes docs/benchmarks.md.
//
// Everything runs on 127.0.0.1 ephemeral ports, as separate processes so
// each one's CPU, GC and RSS are its own: the harness re-executes itself
// with HOPBENCH_ROLE set to become a fast fake upstream ("upstream"), a bare
// httputil.ReverseProxy ("proxy") or hopgate itself ("gateway": gateway.Start
// with telemetry.Setup exporting 100 % of traces over OTLP/HTTP to a sink in
// the harness, metrics scraped by the harness). The harness process is the
// load generator (vegeta as a library for open-loop fixed-rate and
// closed-loop fixed-concurrency attacks, a small SSE client for
// time-to-first-token and idle streams) and the OTLP sink, which counts
// bytes and spans so the export cost is real and its completeness visible.
// Every process it starts (roles, nginx, HAProxy, Redis, node, npm, go
// test) gets Linux's parent-death signal (proc_linux.go): a run that is
// killed leaves no server running (a test binary `go test` started
// finishes its bounded benchmarks on its own).
//
// Targets are measured in alternating rounds, each round in its own
// shuffled order (-seed, given in the report), with a short idle time
// before each turn (-settle) so one target's leftover GC and span export
// do not run in the next one's turn; machine noise and a target's place
// or neighbour in a round then do not favour one of them; the
// report gives medians of rounds and per-round ratios against the direct
// and proxy targets, with the range of the per-round values next to each
// verdict measured in rounds.
// Five more hopgate processes, each identical but for one setting, run in
// the same throughput and completion-latency rounds: 10 % of healthy
// traces exported, tracing off, every trace exported in batches of 128
// from a queue of 8192 (its own sink checks that all its spans arrive),
// GOGC=200 (also in the idle-stream memory test), and every trace exported
// through the OpenTelemetry SDK's otlptracehttp instead of hopgate's
// otlpwire (the one setting no deployment can choose: it measures the
// encoder). BENCH_PEERS=portkey adds Portkey's open-source gateway as a
// fourth target (npm install into the user cache, outside the repository).
//
// Real providers are HTTPS, HTTP/2 where they offer it: the upstream role
// also serves over TLS, with a CA and certificate the harness makes at run
// time (tls.go), on one listener offering HTTP/1.1 only and one offering
// HTTP/2. Two more bare proxies point at them, and the measured hopgate has
// a model for each (bench-h1, bench-h2); the gateway and proxy processes
// trust the CA through SSL_CERT_FILE, which crypto/x509 reads on Linux, so
// dispatch.NewTransport is measured unchanged. The upstream counts the
// connections (handshakes) and the protocol of every request, per TLS turn.
// The translating path is the measured hopgate serving an OpenAI client
// from a provider: anthropic channel (model bench-anthropic) on the same
// upstream, which answers Anthropic Messages at /v1/messages with the same
// text and a stream of the same length; it runs in the throughput and
// time-to-first-token rounds next to the pass-through hopgate.
// Two tenant-limited gateways (an in-process and a Redis limiter) run in
// the throughput and completion-latency rounds too; the in-process one's
// verdict comes from CPU and allocation profiles of turns of its own
// (attrib.go: its share of the samples, read with
// github.com/google/pprof/profile, the parser go tool pprof uses), since
// the rounds spread wider than its 2 % bar.
//
// The floor: nginx and HAProxy from Debian's packages (the Makefile
// installs them), started with configs written for the run (floor.go) in
// front of the same upstreams, plain and over TLS, in the same rounds.
// Every turn also reads, for each process of ours, its threads' CPU time
// (/proc/PID/task/*/schedstat) and its read and write system calls
// (/proc/PID/io): counts per request that a change to how a relay reads
// and writes moves whatever the load, where req/s on 2 cores shared with
// the load generator moves with it.
//
// -only realtime, limits or streams runs one phase alone, with only the
// processes it needs, and writes its section: a before/after of one row
// in minutes instead of the whole run's eighteen.
//
// hopbench owns only this measurement. It must not change how hopgate
// behaves: the gateway under test is built from the same packages and
// defaults as `hopgate serve`, configured through a YAML config and OTEL_*
// variables like a deployment.
package main
