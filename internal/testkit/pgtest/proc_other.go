//go:build !linux

package pgtest

import (
	"errors"
	"os"
	"syscall"
)

// owner is the OS user the server runs as; only Linux switches users.
type owner struct{ uid, gid int }

// serverCredential refuses root off Linux: switching to the postgres user
// is implemented for Linux only.
func serverCredential() (*owner, error) {
	if os.Geteuid() == 0 {
		return nil, errors.New("pgtest runs PostgreSQL as root's postgres user on Linux only")
	}
	return nil, nil
}

func (c *Cluster) sysProcAttr() *syscall.SysProcAttr { return nil }
