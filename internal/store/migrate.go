package store

import (
	"context"
	"database/sql"
	"embed"
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
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(dialect, db, fsys, opts...)
}

// migrate applies every pending migration, each in its own transaction (a
// failed one rolls back whole, on both drivers).
func migrate(ctx context.Context, db *sql.DB, driver string) error {
	p, err := newMigrator(db, driver)
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	if err != nil && driver == DriverSQLite {
		// SQLite has no advisory lock: two processes opening a new file at
		// once may both try the first migration, and the loser fails on
		// "table exists". Its second look finds nothing pending. A real
		// failure fails again.
		_, err = p.Up(ctx)
	}
	return err
}
