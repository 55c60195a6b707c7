package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	peerPortkey    = "portkey"
	portkeyVersion = "1.15.2"
)

// peer is another gateway measured in the same run against the same
// upstream. child is nil (and note says why) when it could not start.
type peer struct {
	name        string
	child       *child
	target      target
	stallHeader http.Header // the same target, upstream stalling after one frame
	note        string
}

func (p *peer) stop() {
	if p.child != nil {
		p.child.kill()
		p.child = nil
	}
}

// firstError is the first line of the peer's stderr that looks like an
// error, so a peer that fails requests says why in the report.
func (p *peer) firstError() string {
	if p.child == nil {
		return ""
	}
	for line := range strings.SplitSeq(p.child.stderr.String(), "\n") {
		if l := strings.TrimSpace(line); strings.Contains(strings.ToLower(l), "error") {
			return l
		}
	}
	return ""
}

// loopbackPreload makes node bind 127.0.0.1 whatever the script asks for:
// Portkey's start-server listens on every interface, and the benchmark
// must not.
const loopbackPreload = `import net from 'node:net';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === 'object') {
    args[0] = { ...args[0], host: '127.0.0.1' };
  } else if (typeof args[1] === 'function') {
    args.splice(1, 0, '127.0.0.1');
  } else {
    args[1] = '127.0.0.1';
  }
  return listen.apply(this, args);
};
`

// startPeer installs (once, into the user cache, outside the repository)
// and starts a peer gateway in front of the upstream at upAddr.
func startPeer(name, upAddr string, log io.Writer) *peer {
	p := &peer{name: name}
	if name != peerPortkey {
		p.note = "unknown peer " + name
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		p.note = "portkey skipped: no user cache directory: " + err.Error()
		return p
	}
	dir := filepath.Join(cache, "hopgate", "portkey-"+portkeyVersion)
	script := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
	if _, err := os.Stat(script); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			p.note = "portkey skipped: " + err.Error()
			return p
		}
		fmt.Fprintf(log, "hopbench: npm install @portkey-ai/gateway@%s into %s\n", portkeyVersion, dir)
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", dir,
			"@portkey-ai/gateway@"+portkeyVersion)
		cmd.Dir = dir
		endWithParent(cmd)
		if out, err := cmd.CombinedOutput(); err != nil {
			p.note = fmt.Sprintf("portkey skipped: npm install failed (%v): %s", err, lastLine(out))
			return p
		}
	}
	preload := filepath.Join(dir, "bind-loopback.mjs")
	if err := os.WriteFile(preload, []byte(loopbackPreload), 0o644); err != nil {
		p.note = "portkey skipped: " + err.Error()
		return p
	}
	port, err := freePort()
	if err != nil {
		p.note = "portkey skipped: " + err.Error()
		return p
	}
	cmd := exec.Command("node", "--import", "file://"+preload, script, "--port="+strconv.Itoa(port), "--headless")
	cmd.Env = append(os.Environ(), "NODE_ENV=production")
	c, err := startChild(name, cmd, false)
	if err != nil {
		p.note = "portkey skipped: " + err.Error()
		return p
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := waitPort(addr, 30*time.Second, c.done); err != nil {
		c.kill()
		p.note = "portkey skipped: " + err.Error()
		return p
	}
	p.child = c
	h := baseHeader()
	h.Set("x-portkey-provider", "openai")
	h.Set("x-portkey-custom-host", "http://"+upAddr+"/v1")
	p.target = target{name: name, url: "http://" + addr + "/v1/chat/completions", header: h, model: modelBench, pid: c.pid()}
	// The stall path goes through the custom host.
	sh := h.Clone()
	sh.Set("x-portkey-custom-host", "http://"+upAddr+"/stall/v1")
	p.stallHeader = sh
	return p
}

func lastLine(b []byte) string {
	s := string(b)
	if len(s) > 300 {
		s = s[len(s)-300:]
	}
	return s
}
