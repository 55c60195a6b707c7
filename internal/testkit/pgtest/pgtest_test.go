package pgtest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// run executes sql on dsn and returns the first column of its first row
// ("" for a statement without rows).
func run(t *testing.T, dsn, sql string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var s string
	if rows.Next() {
		if err := rows.Scan(&s); err != nil {
			return "", err
		}
	}
	rows.Close()
	return s, rows.Err()
}

// A database is fresh per test, writable, and not shared with another
// test's database on the same server.
func TestSharedDatabasesAreSeparate(t *testing.T) {
	c := Shared(t)
	a, b := c.NewDatabase(t), c.NewDatabase(t)
	if a == b {
		t.Fatalf("two databases with one DSN %q", a)
	}
	if _, err := run(t, a, "CREATE TABLE only_in_a (x text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, b, "SELECT x FROM only_in_a"); err == nil {
		t.Fatal("a table of database a is visible in database b")
	}
	if Shared(t) != c {
		t.Fatal("Shared started a second server")
	}
}

// The server refuses connections while stopped and comes back on the same
// port with its databases after Start: what the store's outage tests need.
func TestStopStart(t *testing.T) {
	c := New(t)
	dsn := c.NewDatabase(t)
	if _, err := run(t, dsn, "CREATE TABLE kept (x text)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := run(t, dsn, "SELECT 'down'"); err == nil {
		t.Fatal("query succeeded while the server was stopped")
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err == nil {
		t.Fatal("Start of a running server did not fail")
	}
	if _, err := run(t, dsn, "SELECT x FROM kept"); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// When tests run as root the server runs as the postgres user, which it
// insists on; otherwise as ourselves.
func TestServerUser(t *testing.T) {
	c := Shared(t)
	c.mu.Lock()
	pid := c.proc.cmd.Process.Pid
	c.mu.Unlock()
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skip("no /proc:", err)
	}
	want := os.Geteuid()
	if want == 0 {
		want = c.cred.uid
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "Uid:" {
			if f[2] != strconv.Itoa(want) {
				t.Fatalf("server runs as uid %s, want %d", f[2], want)
			}
			return
		}
	}
	t.Fatal("no Uid line in /proc/PID/status")
}

// Database names are valid identifiers, unique, and at most 63 bytes.
func TestDatabaseName(t *testing.T) {
	var c Cluster
	long := c.databaseName("TestX/" + strings.Repeat("Sub Test-", 20))
	if len(long) > 63 || !strings.HasPrefix(long, "t1_testx_sub_test_") {
		t.Fatalf("databaseName = %q", long)
	}
	if c.databaseName("TestX") == c.databaseName("TestX") {
		t.Fatal("two databases of one test share a name")
	}
}
