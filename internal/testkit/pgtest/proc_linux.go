package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// owner is the OS user the server runs as.
type owner struct{ uid, gid int }

// serverCredential returns the postgres system user when we are root (the
// server refuses to run as root), else nil: run as ourselves.
func serverCredential() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(Superuser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs the %q system user (Debian's postgresql package creates it): %w", Superuser, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &owner{uid: uid, gid: gid}, nil
}

// sysProcAttr runs a child as the server's user, with no supplementary
// groups, and has the kernel stop it (SIGQUIT: immediate shutdown) if the
// test binary dies without cleaning up.
func (c *Cluster) sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT}
	if c.cred != nil {
		a.Credential = &syscall.Credential{Uid: uint32(c.cred.uid), Gid: uint32(c.cred.gid), Groups: []uint32{}}
	}
	return a
}
