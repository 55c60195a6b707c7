// Package pgtest starts real, throwaway PostgreSQL servers for tests: initdb
// into a temporary directory, then postgres on a free 127.0.0.1 port with its
// unix socket in that directory, fsync off (a test cluster never outlives
// its test binary).
//
// A test package shares one server (Shared, started on first use and
// stopped by Main at the end) and gets a fresh database per test
// (NewDatabase). A test that stops and restarts the server under load takes
// a server of its own (New), so it disturbs nobody else.
//
// The binaries come from HOPGATE_PG_BIN_DIR (what `make postgres` prints),
// else the newest /usr/lib/postgresql/*/bin (Debian's layout), else PATH.
// When they are missing the test is skipped, except under CI=true, where a
// missing server means the install step broke and must not pass silently.
// Under -short every PostgreSQL test is skipped, like the repo's other tests
// that start real components.
//
// PostgreSQL refuses to run as root, and tests here run as root: then initdb
// and postgres run as the `postgres` system user (created by Debian's
// package), through the child's process credentials rather than runuser or
// setpriv, so the process we signal is the server itself.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hopgate/hopgate/internal/testkit"
)

// EnvBinDir names the directory holding initdb and postgres.
const EnvBinDir = "HOPGATE_PG_BIN_DIR"

// Superuser is the role every cluster is created with (trust auth, no
// password: the server listens on loopback only).
const Superuser = "postgres"

// readyTimeout bounds how long Start polls for a server that accepts
// connections; stopTimeout how long Stop waits after SIGINT before SIGKILL.
const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 60 * time.Second
)

// Cluster is one running (or stopped) PostgreSQL server and its data
// directory. Its methods are safe for concurrent use.
type Cluster struct {
	bin  string // directory of initdb and postgres
	dir  string // temporary root: data/, the unix socket; owned by the server's user
	port int
	cred *owner             // the postgres user, when we are root; else nil
	log  testkit.SyncBuffer // the server's stderr, across restarts

	mu   sync.Mutex // serialises Start and Stop
	proc *process   // nil while stopped

	dbs atomic.Int64 // databases created, for unique names
}

// process is a started server; done closes when it has exited.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	sharedMu   sync.Mutex
	mainActive bool
	shared     *Cluster
	sharedErr  error
)

// Main runs the package's tests and then stops and removes the shared
// server, if one was started. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	sharedMu.Lock()
	mainActive = true
	sharedMu.Unlock()
	code := m.Run()
	sharedMu.Lock()
	c := shared
	shared = nil
	sharedMu.Unlock()
	if c != nil {
		if err := c.remove(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	os.Exit(code)
}

// Shared returns the package's shared server, starting it on first use. It
// needs Main in the package's TestMain (which stops it). Tests on it must
// not Stop it: use New for that.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	bin := requireBinDir(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !mainActive {
		t.Fatal("pgtest.Shared needs `func TestMain(m *testing.M) { pgtest.Main(m) }` so the server is stopped at the end")
	}
	if sharedErr != nil {
		t.Fatalf("pgtest: the shared server did not start: %v", sharedErr)
	}
	if shared == nil {
		shared, sharedErr = start(bin)
		if sharedErr != nil {
			t.Fatalf("pgtest: %v", sharedErr)
		}
	}
	return shared
}

// New starts a server of the test's own, stopped and removed when the test
// ends.
func New(t testing.TB) *Cluster {
	t.Helper()
	bin := requireBinDir(t)
	c, err := start(bin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.remove(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c
}

// requireBinDir finds the binaries or skips (fails under CI=true).
func requireBinDir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test starts a real PostgreSQL")
	}
	bin, err := findBinDir()
	if err == nil && os.Geteuid() == 0 {
		_, err = serverCredential()
	}
	if err != nil {
		msg := fmt.Sprintf("PostgreSQL unavailable: %v (run `make postgres`, or set %s)", err, EnvBinDir)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// findBinDir returns the first directory holding both initdb and postgres:
// $HOPGATE_PG_BIN_DIR, the newest /usr/lib/postgresql/*/bin, PATH.
func findBinDir() (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%s=%s holds no initdb and postgres", EnvBinDir, dir)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first: "15" before "9.6", numerically.
	slices.SortFunc(dirs, func(a, b string) int {
		return majorOf(b) - majorOf(a)
	})
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", errors.New("initdb and postgres not found")
}

// majorOf reads the major version out of /usr/lib/postgresql/<v>/bin.
func majorOf(dir string) int {
	v := filepath.Base(filepath.Dir(dir))
	v, _, _ = strings.Cut(v, ".")
	n, _ := strconv.Atoi(v)
	return n
}

// start creates a cluster in a new temporary directory and starts it on a
// free loopback port.
func start(bin string) (*Cluster, error) {
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hopgate-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir, cred: cred}
	if err := c.init(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The port was free a moment ago; another process may take it first.
	// Bind failures are retried on a new port, anything else is final.
	for range 5 {
		if c.port, err = freePort(); err != nil {
			break
		}
		if err = c.Start(); err == nil {
			return c, nil
		}
		if !strings.Contains(c.log.String(), "could not bind") {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

// init runs initdb.
func (c *Cluster) init() error {
	if c.cred != nil {
		if err := os.Chown(c.dir, c.cred.uid, c.cred.gid); err != nil {
			return err
		}
	}
	cmd := exec.Command(filepath.Join(c.bin, "initdb"),
		"-D", c.dataDir(), "-U", Superuser, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = c.dir
	cmd.SysProcAttr = c.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// Start starts the server (again, after Stop) on its port and waits until
// it accepts connections. Databases created before Stop are still there.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return errors.New("pgtest: server already running")
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"),
		"-D", c.dataDir(),
		"-p", strconv.Itoa(c.port),
		"-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=300",
		"-c", "shared_buffers=32MB")
	cmd.Dir = c.dir
	cmd.Stdout = &c.log
	cmd.Stderr = &c.log
	cmd.SysProcAttr = c.sysProcAttr()
	p, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		select {
		case <-p.done:
			return fmt.Errorf("postgres exited before accepting connections: %v\n%s", cmd.ProcessState, c.log.Tail(20))
		default:
		}
		if err := c.ping(ctx); err == nil {
			c.proc = p
			return nil
		}
		select {
		case <-ctx.Done():
			stopProcess(p)
			return fmt.Errorf("postgres not ready after %v:\n%s", readyTimeout, c.log.Tail(20))
		case <-p.done:
		case <-time.After(20 * time.Millisecond): // readiness poll, not a wait for time to pass
		}
	}
}

// Stop shuts the server down the "fast" way (open transactions roll back,
// clients are disconnected) and waits for it to exit. Stopping a stopped
// server does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	err := stopProcess(c.proc)
	c.proc = nil
	return err
}

// stopProcess sends SIGINT and waits; SIGKILL when it does not exit in time.
func stopProcess(p *process) error {
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("postgres ignored SIGINT for %v and was killed", stopTimeout)
	}
}

// spawn starts cmd from a goroutine locked to its OS thread, which stays
// alive until the process exits: Pdeathsig is tied to the thread that
// forked, and a Go runtime thread exiting early would otherwise kill the
// server under a running test.
func spawn(cmd *exec.Cmd) (*process, error) {
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		defer close(p.done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// remove stops the server and deletes its directory.
func (c *Cluster) remove() error {
	err := c.Stop()
	return errors.Join(err, os.RemoveAll(c.dir))
}

// Port is the server's TCP port on 127.0.0.1; it stays the same across Stop
// and Start.
func (c *Cluster) Port() int { return c.port }

// DSN returns a connection URL for database db as the superuser.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, c.port, db)
}

// NewDatabase creates an empty database for this test and returns its DSN.
// The database is dropped when the test ends (if the server runs then).
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	name := c.databaseName(t.Name())
	if err := c.admin("CREATE DATABASE " + name); err != nil {
		t.Fatalf("pgtest: create database: %v\n%s", err, c.log.Tail(10))
	}
	t.Cleanup(func() {
		// FORCE: a client the test forgot to close must not keep it.
		c.admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	})
	return c.DSN(name)
}

// databaseName derives a unique identifier from the test's name, so the
// server's log says whose database it was.
func (c *Cluster) databaseName(test string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t%d_", c.dbs.Add(1))
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 63 { // NAMEDATALEN - 1
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// LogTail returns the server's last n log lines, for failure messages.
func (c *Cluster) LogTail(n int) string { return c.log.Tail(n) }

// admin runs one statement as the superuser on database "postgres".
func (c *Cluster) admin(stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt)
	return err
}

// ping reports whether the server answers a query.
func (c *Cluster) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
