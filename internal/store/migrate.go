package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"hash/crc32"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// migrations holds one directory per driver with the same versions: the
// same schema written in each dialect (see the files' headers).
//
//go:embed migrations
var migrations embed.FS

// migrationsFS returns the driver's migrations.
func migrationsFS(driver string) (fs.FS, error) {
	return fs.Sub(migrations, "migrations/"+driver)
}

// migrationLockID is the PostgreSQL advisory lock held while migrating:
// hopgate's own, so another goose user of the same database does not wait
// for us, nor we for it.
var migrationLockID = int64(crc32.ChecksumIEEE([]byte("hopgate/internal/store")))

// newMigrator returns goose's provider for db. On PostgreSQL it holds an
// advisory lock while it migrates, so replicas starting together apply each
// migration once.
func newMigrator(db *sql.DB, driver string) (*goose.Provider, error) {
	fsys, err := migrationsFS(driver)
	if err != nil {
		return nil, err
	}
	dialect := goose.DialectSQLite3
	// Only the SQL files embedded here: nothing registered elsewhere in the
	// binary through goose's global registry.
	opts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if driver == DriverPostgres {
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker(
			lock.WithLockID(migrationLockID),
			lock.WithLockTimeout(1, 300), // poll each second, up to 5 minutes
		)
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(dialect, db, fsys, opts...)
}

// maxMigrateBusy bounds the tries of a migration that met SQLITE_BUSY.
const maxMigrateBusy = 50

// migrate applies every pending migration, each in its own transaction (a
// failed one rolls back whole, on both drivers).
func migrate(ctx context.Context, db *sql.DB, driver string) error {
	p, err := newMigrator(db, driver)
	if err != nil {
		return err
	}
	for busy := 0; ; {
		before, err := p.GetDBVersion(ctx)
		if err != nil {
			return err
		}
		_, err = p.Up(ctx)
		if err == nil || driver != DriverSQLite {
			return err
		}
		// A transaction that read before it wrote meets another process's
		// write lock with SQLITE_BUSY at once (no busy_timeout wait: that
		// could deadlock): try again, a bounded number of times.
		if errors.Is(classify(err), ErrUnavailable) && busy < maxMigrateBusy {
			busy++
			continue
		}
		// SQLite has no advisory lock: processes opening a new file at
		// once may both try a migration, and the loser fails ("table
		// exists") on what the winner just applied. Try again while the
		// schema advances under us; a failure of our own does not advance
		// it and is returned.
		after, verr := p.GetDBVersion(ctx)
		if verr != nil || after <= before {
			return err
		}
	}
}
