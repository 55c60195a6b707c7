//go:build !unix

package wallet

import "os"

// lockFile does nothing where flock(2) does not exist: give each replica
// its own billing.journal_dir there.
func lockFile(*os.File) error { return nil }
