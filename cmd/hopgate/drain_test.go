package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit"
)

// TestServeCutsStreamsInBandOnDrainTimeout runs the real binary (issue 35
// item 4): a stream whose upstream stalls is still open when SIGTERM's
// drain runs out (--drain-timeout 200ms); it ends with the in-band
// gateway_shutting_down frame and no [DONE], the request is logged as
// interrupted (not canceled, 499), and the process still exits 0.
func TestServeCutsStreamsInBandOnDrainTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, fakes, addr, adminAddr, cfgPath := binaryFixture(t)
	writeOneModelConfig(t, cfgPath, fakes, addr, adminAddr, "m|tokens=20|stall=1h")
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--drain-timeout", "200ms")
	cmd.Env = append(os.Environ(), "CHANNEL_KEY="+fakes.APIKey)
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitReady(t, "http://"+adminAddr+"/readyz")

	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for head := ""; !strings.Contains(head, "tok10 "); {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the stall: %v", err)
		}
		head += line
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br) // the closed connection may end it unexpectedly: the bytes decide
	if !strings.Contains(string(rest), `"code":"gateway_shutting_down"`) || !strings.HasSuffix(string(rest), "\"}\n\n") ||
		strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream the drain cut does not end with the gateway_shutting_down frame:\n%s", rest)
	}
	waitExit(t, cmd, logs, testkit.Bound)
	for _, want := range []string{`"msg":"drain timeout: streams still open end with gateway_shutting_down","streams":1`,
		`"status":200,"outcome":"interrupted","failover_path":"a:gateway_shutting_down"`} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %s:\n%s", want, logs.String())
		}
	}
}
