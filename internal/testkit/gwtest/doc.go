// Package gwtest starts a real hopgate gateway for tests: real listeners
// and real HTTP, in front of real fake providers (cmd/fakeupstream), one
// per id, whose base URLs replace {{url:ID}} in the test's YAML.
//
// New serves the api handler on an httptest server (the engine's tests);
// Start runs gateway.Start, main and admin listeners, {{listen}} and
// {{admin}} in the YAML (the process-level tests). Both put the gateway's
// clock and the providers' clock on fake clocks starting at Epoch, record
// spans in memory, record every timer the engine arms (ArmedClock), and
// build telemetry from the config the way gateway.Start does. Options
// swap in real clocks and OTLP export for benchmarks and end-to-end tests,
// and hand-written handlers for behaviour the fault grammar cannot express.
//
// A Gateway owns the helpers that know where a request stands: post,
// call, async (cancelled at cleanup, before the gateway closes), open a
// stream, wait for timers, attempts and span ends, and look a trace up.
// Waiting on a condition goes through testkit.Eventually and testkit.Recv,
// whose real-time bound is only a failure bound. StartFakes gives the
// providers and placeholders alone, for tests that run the hopgate binary.
//
// The package owns the harness, not the assertions: what a test checks
// stays in the test. It is for tests only; no non-test code imports it.
package gwtest
