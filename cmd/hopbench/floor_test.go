package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The configs hopbench writes must be ones the real binaries accept: each
// is checked by the binary's own config test (nginx -t, haproxy -c) where
// it is installed (make test installs both).
func TestFloorConfigsParse(t *testing.T) {
	dir := t.TempDir()
	pki, err := newBenchPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	up := floorUpstreams{plain: "127.0.0.1:1", tlsH1: "127.0.0.1:2", tlsH2: "127.0.0.1:3", caFile: pki.caFile}
	for _, tc := range []struct {
		name, env string
		cfg       string
		args      func(conf string) []string
	}{
		{floorNginx, envNginxBin, nginxConfig(dir, "127.0.0.1:4", "127.0.0.1:5", up, 2),
			func(conf string) []string { return []string{"-t", "-p", dir, "-c", conf, "-e", "stderr"} }},
		{floorHAProxy, envHAProxyBin, haproxyConfig("127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6", up, 2),
			func(conf string) []string { return []string{"-c", "-f", conf} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := floorBinary(tc.name, tc.env, os.Getenv)
			if err != nil {
				t.Skip(err)
			}
			conf := filepath.Join(dir, tc.name+".conf")
			if err := os.WriteFile(conf, []byte(tc.cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, tc.args(conf)...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s rejects its config: %v\n%s\n%s", tc.name, err, out, tc.cfg)
			}
		})
	}
}

// Only error lines of a floor's log are reported, not its notices.
func TestFloorErrors(t *testing.T) {
	log := strings.Join([]string{
		"[NOTICE]   (1) : haproxy version is 2.6.12",
		"[WARNING]  (1) : something mild",
		"2026/12/01 10:00:00 [error] 7#7: *1 upstream prematurely closed connection",
		"[ALERT]    (1) : Cannot raise FD limit",
	}, "\n")
	n, last := floorErrors(log)
	if n != 2 || !strings.HasPrefix(last, "[ALERT]") {
		t.Fatalf("floorErrors = %d, %q; want 2 and the ALERT line", n, last)
	}
}
