package wallet_test

import (
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

// TestMain stops the package's shared PostgreSQL (the end-to-end tests run
// every wallet property on SQLite and on PostgreSQL).
func TestMain(m *testing.M) { pgtest.Main(m) }
