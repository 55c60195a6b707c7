package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit"
)

// TestServeReloadsOnSIGHUP runs the real binary: SIGHUP with a changed
// valid file installs it (a new model appears in /v1/models); SIGHUP with
// a broken file is rejected with a logged error and the config in force
// keeps serving.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, fakes, addr, adminAddr, cfgPath := binaryFixture(t)
	write := func(models ...string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "listen: %s\nadmin_listen: %s\nauth: {mode: none}\nchannels:\n  - {id: a, base_url: \"{{url:a}}\", api_key_env: CHANNEL_KEY}\nmodels:\n", addr, adminAddr)
		for _, m := range models {
			fmt.Fprintf(&b, "  - {name: %s, chain: [{channel: a, upstream_model: m, price: {input: 1, output: 1}}]}\n", m)
		}
		if err := os.WriteFile(cfgPath, []byte(fakes.Expand(b.String())), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("m1")
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--drain-timeout", "2s")
	cmd.Env = append(os.Environ(), "CHANNEL_KEY="+fakes.APIKey)
	logs := &testkit.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitReady(t, "http://"+adminAddr+"/readyz")

	models := func() string {
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Data []struct{ ID string } }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range out.Data {
			ids = append(ids, d.ID)
		}
		sort.Strings(ids)
		return strings.Join(ids, ",")
	}
	// eventually waits for a condition the child reaches on its own
	// (signal delivery and reload are asynchronous); it never waits for
	// time to pass. A failure shows the child's log.
	eventually := func(what string, ok func() bool) {
		t.Helper()
		child.EventuallyNil(t, func() error {
			if ok() {
				return nil
			}
			return fmt.Errorf("logs:\n%s", logs.String())
		}, what)
	}
	if got := models(); got != "m1" {
		t.Fatalf("models %q", got)
	}

	write("m1", "m2")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually("reload with m2", func() bool { return models() == "m1,m2" })
	// The new config serves a moment before the reload is logged.
	eventually("reload logged", func() bool { return strings.Contains(logs.String(), `"msg":"config reloaded"`) })

	if err := os.WriteFile(cfgPath, []byte("listen: [broken\nmodels: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually("rejection logged", func() bool {
		return strings.Contains(logs.String(), "config reload rejected; keeping the config in force")
	})
	if got := models(); got != "m1,m2" {
		t.Fatalf("after a broken reload models are %q, want the old m1,m2", got)
	}
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m2","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("old config no longer serving: %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually("drained exit", func() bool { return strings.Contains(logs.String(), `"msg":"drained; bye"`) })
}
