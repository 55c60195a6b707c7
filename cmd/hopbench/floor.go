package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The floor: what a platform team compares a gateway against is not Go's
// reverse proxy but nginx and HAProxy, the proxies they already run. Both
// are started here from Debian's packages (deploy/nginx/install.sh,
// deploy/haproxy/install.sh; `make bench` installs them when missing) with
// configs written for the run, on loopback ports, in front of the same
// upstreams, tuned the way an operator would proxy an LLM API: upstream
// keep-alive, no response buffering (SSE frames pass as they arrive), one
// worker (thread) per core.
const (
	floorNginx   = "nginx"
	floorHAProxy = "haproxy"
)

// Binaries, overridable (the Makefile passes what the install scripts
// printed).
const (
	envNginxBin   = "HOPGATE_NGINX_BIN"
	envHAProxyBin = "HOPGATE_HAPROXY_BIN"
)

// floor is one floor proxy: its process, its listeners (host:port; "" for
// a path it cannot serve) and, when it could not start, why.
type floor struct {
	name  string
	child *child
	dir   string
	plain string // to the plain upstream
	tlsH1 string // to the TLS upstream offering HTTP/1.1 only
	tlsH2 string // over HTTP/2 to the TLS upstream offering it ("" for nginx: its proxy module speaks HTTP/1.x only)
	note  string
}

func (f *floor) stop() {
	if f.child != nil {
		f.child.kill()
		f.child = nil
	}
	if f.dir != "" {
		_ = os.RemoveAll(f.dir)
	}
}

// floorBinary finds name: the environment's override, PATH, then Debian's
// /usr/sbin (not on every user's PATH).
func floorBinary(name, env string, getenv func(string) string) (string, error) {
	if b := getenv(env); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath(name); err == nil {
		return b, nil
	}
	if b := "/usr/sbin/" + name; isExecutable(b) {
		return b, nil
	}
	return "", fmt.Errorf("%s not found (set %s, or run deploy/%s/install.sh)", name, env, name)
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// floorUpstreams are the addresses (host:port) a floor proxies to.
type floorUpstreams struct {
	plain, tlsH1, tlsH2 string
	caFile              string // the TLS upstreams' CA
}

// startFloor writes name's config for up, starts it and waits for its
// listeners. A floor that cannot start returns with note set (the report
// says why) and the run goes on without it.
func startFloor(name string, up floorUpstreams, getenv func(string) string, log io.Writer) *floor {
	f := &floor{name: name}
	env := map[string]string{floorNginx: envNginxBin, floorHAProxy: envHAProxyBin}[name]
	bin, err := floorBinary(name, env, getenv)
	if err != nil {
		f.note = name + " skipped: " + err.Error()
		return f
	}
	if f.dir, err = os.MkdirTemp("", "hopbench-"+name+"-"); err != nil {
		f.note = name + " skipped: " + err.Error()
		return f
	}
	_ = os.Chmod(f.dir, 0o755) // nginx's workers run as another user
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			f.note = name + " skipped: " + err.Error()
			return f
		}
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	f.plain, f.tlsH1 = addr(ports[0]), addr(ports[1])
	var cfg string
	var cmd *exec.Cmd
	conf := filepath.Join(f.dir, name+".conf")
	switch name {
	case floorNginx:
		cfg = nginxConfig(f.dir, f.plain, f.tlsH1, up, runtime.NumCPU())
		cmd = exec.Command(bin, "-p", f.dir, "-c", conf, "-e", "stderr")
	case floorHAProxy:
		f.tlsH2 = addr(ports[2])
		cfg = haproxyConfig(f.plain, f.tlsH1, f.tlsH2, up, runtime.NumCPU())
		cmd = exec.Command(bin, "-db", "-f", conf)
	default:
		f.note = "unknown floor " + name
		return f
	}
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		f.note = name + " skipped: " + err.Error()
		return f
	}
	fmt.Fprintf(log, "hopbench: starting %s (%s) on %s\n", name, bin, f.plain)
	c, err := startChild(name, cmd, false)
	if err != nil {
		f.note = name + " skipped: " + err.Error()
		return f
	}
	for _, a := range []string{f.plain, f.tlsH1, f.tlsH2} {
		if a == "" {
			continue
		}
		if err := waitPort(a, 15*time.Second, c.done); err != nil {
			c.kill()
			f.note = fmt.Sprintf("%s skipped: %v: %s", name, err, lastLine([]byte(c.stderr.String())))
			return f
		}
	}
	f.child = c
	return f
}

// nginxConfig proxies plain to up.plain and tlsH1 to up.tlsH1 (verifying
// its certificate), with upstream keep-alive and proxy_buffering off, as
// an LLM API is proxied (frames pass as they arrive). Every path and log
// stays in dir; nothing is read from /etc.
func nginxConfig(dir, plain, tlsH1 string, up floorUpstreams, workers int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("daemon off;")
	p("worker_processes %d;", workers)
	p("pid %s;", filepath.Join(dir, "nginx.pid"))
	p("error_log stderr warn;")
	p("events { worker_connections 8192; multi_accept on; }")
	p("http {")
	p("  access_log off;")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		p("  %s_temp_path %s;", t, filepath.Join(dir, t))
	}
	p("  keepalive_requests 1000000;")
	p("  keepalive_timeout 75s;")
	p("  upstream up { server %s; keepalive 256; keepalive_requests 1000000; }", up.plain)
	p("  upstream up_h1 { server %s; keepalive 256; keepalive_requests 1000000; }", up.tlsH1)
	for _, s := range []struct{ listen, pass string }{{plain, "http://up"}, {tlsH1, "https://up_h1"}} {
		p("  server {")
		p("    listen %s;", s.listen)
		p("    location / {")
		p("      proxy_pass %s;", s.pass)
		p("      proxy_http_version 1.1;")
		p(`      proxy_set_header Connection "";`)
		p("      proxy_buffering off;")
		p("      proxy_request_buffering off;")
		p("      proxy_read_timeout 1h;")
		if strings.HasPrefix(s.pass, "https") {
			p("      proxy_ssl_server_name on;")
			p("      proxy_ssl_name localhost;")
			p("      proxy_ssl_verify on;")
			p("      proxy_ssl_trusted_certificate %s;", up.caFile)
			p("      proxy_ssl_session_reuse on;")
		}
		p("    }")
		p("  }")
	}
	p("}")
	return b.String()
}

// haproxyConfig proxies plain, tlsH1 and tlsH2 (HTTP/2 to the upstream
// over ALPN) with `http-reuse always`, its threads one per core.
func haproxyConfig(plain, tlsH1, tlsH2 string, up floorUpstreams, threads int) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("global")
	p("  nbthread %d", threads)
	p("  maxconn 4096") // under the FD limit a test runner gets (20000 here); the bench opens far fewer
	p("defaults")
	p("  mode http")
	p("  timeout connect 5s")
	p("  timeout client 1h")
	p("  timeout server 1h")
	p("  timeout http-keep-alive 75s")
	p("  option http-keep-alive")
	p("  http-reuse always")
	for _, s := range []struct{ name, listen string }{{"plain", plain}, {"h1", tlsH1}, {"h2", tlsH2}} {
		p("frontend fe_%s", s.name)
		p("  bind %s", s.listen)
		p("  default_backend be_%s", s.name)
	}
	p("backend be_plain")
	p("  server up %s", up.plain)
	tlsOpts := "ssl verify required ca-file " + up.caFile + " verifyhost localhost sni str(localhost)"
	p("backend be_h1")
	p("  server up %s %s alpn http/1.1", up.tlsH1, tlsOpts)
	p("backend be_h2")
	p("  server up %s %s alpn h2", up.tlsH2, tlsOpts)
	return b.String()
}

// floorErrors counts the lines of a floor's log that report an error
// (nginx's [error], [crit], [alert], [emerg]; HAProxy's [ALERT]), not its
// notices and warnings, and returns the last one.
func floorErrors(log string) (n int, last string) {
	for line := range strings.SplitSeq(log, "\n") {
		l := strings.ToLower(line)
		for _, lvl := range []string{"[error]", "[crit]", "[alert]", "[emerg]"} {
			if strings.Contains(l, lvl) {
				n, last = n+1, strings.TrimSpace(line)
				break
			}
		}
	}
	return n, last
}
